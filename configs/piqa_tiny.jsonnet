// The offline demo: a tiny GPT-2 built by `python -m catwalk_steps.tiny data/tiny`, fine-tuned
// on PIQA-format data from the same script, scored zero-shot and after fine-tuning.
// Runs on a fresh machine with no network:  tango run configs/piqa_tiny.jsonnet -w workspace
local model = "rc::data/tiny/model";
local task = {
  type: "piqa",
  data_files: { train: "data/tiny/train.jsonl", validation: "data/tiny/validation.jsonl" },
};
// Dropout is off: the data are clean, and with a deterministic forward pass the run gives
// the same numbers for any device_count (try `--ext-var device_count=2`).
local device_count = std.parseInt(std.extVar("device_count"));

{
  steps: {
    finetune: {
      type: "catwalk::finetune",
      model: model,
      tasks: [task],
      batch_size: 16,
      train_epochs: 8,
      learning_rate: 1e-3,
      config_overrides: { resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0 },
      device_count: device_count,
    },
    predict_finetuned: {
      type: "catwalk::predict",
      model: { type: "ref", ref: "finetune" },
      task: task,
    },
    predict_zero_shot: {
      type: "catwalk::predict",
      model: model,
      task: task,
    },
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
        "tiny/zero-shot": { type: "ref", ref: "metrics_zero_shot" },
        "tiny/fine-tuned": { type: "ref", ref: "metrics_finetuned" },
      },
    },
  },
}
