// Helpers for catwalk-steps configs.
{
  // Steps that fine-tune `model` on `task` and score it before and after, with a table of
  // both at the end of the run. `finetune` holds catwalk::finetune's other settings.
  finetune_and_evaluate(name, model, task, finetune):: {
    finetune: { type: "catwalk::finetune", model: model, tasks: [task] } + finetune,
    predict_finetuned: { type: "catwalk::predict", model: { type: "ref", ref: "finetune" }, task: task },
    predict_zero_shot: { type: "catwalk::predict", model: model, task: task },
    metrics_finetuned: {
      type: "catwalk::calculate_metrics",
      predictions: { type: "ref", ref: "predict_finetuned" },
    },
    metrics_zero_shot: {
      type: "catwalk::calculate_metrics",
      predictions: { type: "ref", ref: "predict_zero_shot" },
    },
    results: {
      type: "catwalk::print_metrics",
      metrics: {
        [name + "/zero-shot"]: { type: "ref", ref: "metrics_zero_shot" },
        [name + "/fine-tuned"]: { type: "ref", ref: "metrics_finetuned" },
      },
    },
  },
}
