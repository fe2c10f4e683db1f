// Helpers for catwalk-steps configs: step graphs built from plain lists and objects.
{
  ref(name):: { type: "ref", ref: name },

  // predict_<name> and metrics_<name>: score `model` (a spec string or a ref) on `task`.
  evaluate(name, model, task):: {
    ["predict_" + name]: { type: "catwalk::predict", model: model, task: task },
    ["metrics_" + name]: { type: "catwalk::calculate_metrics", predictions: $.ref("predict_" + name) },
  },

  // predict_<name> for metrics_<name>, as `evaluate` names them.
  predictions_of(metrics_step)::
    assert std.startsWith(metrics_step, "metrics_") : "not a metrics step of evaluate(): " + metrics_step;
    "predict_" + std.substr(metrics_step, 8, std.length(metrics_step) - 8),

  // A cached table of the named metrics steps (`{row name: step name}`), printed at the end of
  // every run. Row names split on "/" into `key_columns`. With `output_dir`, every row's
  // predictions and the table are also written there (and, with `chart` set to a metric such as
  // "acc", a PNG of it), by catwalk::export_predictions.
  report(rows, key_columns=["run"], output_dir=null, chart=null):: {
    table: {
      type: "catwalk::tabulate_metrics",
      metrics: { [row]: $.ref(rows[row]) for row in std.objectFields(rows) },
      key_columns: key_columns,
    },
    results: { type: "catwalk::print_metrics", table: $.ref("table") },
  } + (if output_dir == null then {} else {
    export: {
      type: "catwalk::export_predictions",
      output_dir: output_dir,
      predictions: { [row]: $.ref($.predictions_of(rows[row])) for row in std.objectFields(rows) },
      table: $.ref("table"),
      chart: chart,
    },
  }),

  // Fine-tune `model` on `task`, and score it before and after. `finetune` holds
  // catwalk::finetune's other settings; `output_dir` as in `report`.
  finetune_and_evaluate(name, model, task, finetune, output_dir=null)::
    { finetune: { type: "catwalk::finetune", model: model, tasks: [task] } + finetune }
    + $.evaluate("zero_shot", model, task)
    + $.evaluate("finetuned", $.ref("finetune"), task)
    + $.report(
      { [name + "/zero-shot"]: "metrics_zero_shot", [name + "/fine-tuned"]: "metrics_finetuned" },
      output_dir=output_dir,
    ),

  // The cross product of `models` x `train_tasks` x `seeds` x `learning_rates` (models and
  // tasks are objects: name -> spec or task config), each fine-tuned model and each stock model
  // scored on every task of `eval_tasks`. Steps that do not depend on each other run in
  // parallel under `tango run --parallelism N`, or in many `tango run -s` processes (README).
  // `output_dir` and `chart` as in `report`.
  sweep(models, train_tasks, eval_tasks, seeds, learning_rates, finetune, output_dir=null, chart="acc")::
    local grid = [
      { model: m, train: t, seed: s, lr: lr, name: std.format("%s-%s-seed%d-lr%g", [m, t, s, lr]) }
      for m in std.objectFields(models)
      for t in std.objectFields(train_tasks)
      for s in seeds
      for lr in learning_rates
    ];
    local finetunes = {
      ["finetune_" + g.name]: {
        type: "catwalk::finetune",
        model: models[g.model],
        tasks: [train_tasks[g.train]],
        seed: g.seed,
        learning_rate: g.lr,
      } + finetune
      for g in grid
    };
    local zero_shot = [{ model: m, eval: e, name: m + "-" + e } for m in std.objectFields(models) for e in std.objectFields(eval_tasks)];
    local finetuned = [g { eval: e, eval_name: g.name + "-" + e } for g in grid for e in std.objectFields(eval_tasks)];
    finetunes
    + std.foldl(function(acc, z) acc + $.evaluate("zero_shot_" + z.name, models[z.model], eval_tasks[z.eval]), zero_shot, {})
    + std.foldl(function(acc, f) acc + $.evaluate(f.eval_name, $.ref("finetune_" + f.name), eval_tasks[f.eval]), finetuned, {})
    + $.report(
      { [z.eval + "/" + z.model + "/zero-shot/-/-"]: "metrics_zero_shot_" + z.name for z in zero_shot }
      + { [std.format("%s/%s/%s/%d/%g", [f.eval, f.model, f.train, f.seed, f.lr])]: "metrics_" + f.eval_name for f in finetuned },
      ["task", "model", "finetuned_on", "seed", "lr"],
      output_dir=output_dir,
      chart=chart,
    ),
}
