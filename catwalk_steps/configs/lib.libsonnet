// Helpers for catwalk-steps configs: step graphs built from plain lists and objects.
// They ship inside the package. A config anywhere imports them as `import "lib.libsonnet"` and
// runs with `python -m catwalk_steps.run CONFIG -w WORKSPACE` (tango run, with this folder on
// the Jsonnet import path); the configs of the repository's configs/ also run with `tango run`.
local suites = import "suites.libsonnet";

{
  ref(name):: { type: "ref", ref: name },

  // predict_<name> and metrics_<name>: score `model` (a spec string or a ref) on `task`;
  // `predict` holds catwalk::predict's other settings (split, limit, ...).
  evaluate(name, model, task, predict={}):: {
    ["predict_" + name]: { type: "catwalk::predict", model: model, task: task } + predict,
    ["metrics_" + name]: { type: "catwalk::calculate_metrics", predictions: $.ref("predict_" + name) },
  },

  // predict_<name> for metrics_<name>, as `evaluate` names them.
  predictions_of(metrics_step)::
    assert std.startsWith(metrics_step, "metrics_") : "not a metrics step of evaluate(): " + metrics_step;
    "predict_" + std.substr(metrics_step, 8, std.length(metrics_step) - 8),

  // A cached table of the named metrics steps (`{row name: step name}`), printed at the end of
  // every run. Row names split on "/" into `key_columns` (the last keeps any "/" more: a model
  // path); with `average_over` (a key column), each combination of the other columns gets a
  // macro-average row. With `output_dir`, every
  // row's predictions and the table are also written there (and, with `chart` set to a metric
  // such as "acc", a PNG of it), by catwalk::export_predictions. `training` ({run name: finetune
  // step name}) adds training.png: each fine-tuned model's training loss and validation accuracy.
  // `replicates` (a key column, "seed") adds each setting's mean, sd, min and max over it;
  // `baseline` (a row name without its task and replicate parts) compares every other row of the
  // same task with it, paired on the instances (README: Comparisons). `diffs` ({name: [baseline
  // row, candidate row]}) writes each pair's changed instances to output_dir/diffs/<name>.
  report(rows, key_columns=["run"], average_over=null, output_dir=null, chart=null, training=null,
         baseline=null, replicates=null, diffs={}):: {
    table: {
      type: "catwalk::tabulate_metrics",
      metrics: { [row]: $.ref(rows[row]) for row in std.objectFields(rows) },
      key_columns: key_columns,
    } + (if average_over == null then {} else { average_over: average_over })
    + (if replicates == null then {} else { replicates: replicates })
    + (if baseline == null then {} else {
      baseline: baseline,
      predictions: { [row]: $.ref($.predictions_of(rows[row])) for row in std.objectFields(rows) },
    }),
    results: { type: "catwalk::print_metrics", table: $.ref("table") },
  } + (if output_dir == null then {} else {
    export: {
      type: "catwalk::export_predictions",
      output_dir: output_dir,
      predictions: { [row]: $.ref($.predictions_of(rows[row])) for row in std.objectFields(rows) },
      table: $.ref("table"),
      chart: chart,
    } + (if training == null then {} else {
      training: { [run]: $.ref(training[run]) for run in std.objectFields(training) },
    }),
  } + {
    ["diff_" + name]: {
      type: "catwalk::export_diff",
      output_dir: output_dir + "/diffs/" + name,
      baseline: $.ref($.predictions_of(rows[diffs[name][0]])),
      candidate: $.ref($.predictions_of(rows[diffs[name][1]])),
      baseline_name: diffs[name][0],
      candidate_name: diffs[name][1],
    }
    for name in std.objectFields(diffs)
  }),

  // Every task of the named suite (suites.libsonnet) scored by every model of `models`
  // (name -> spec or ref) at every shot count of `shots`, in one table with a macro average
  // per model and shot count. `tasks` (suite task name -> settings) is merged into the suite's
  // task configs, e.g. local data_files; `predict` holds catwalk::predict's other settings.
  suite(name, models, shots=[0], tasks={}, predict={})::
    local entries = suites[name];
    local runs = [
      { model: m, task: t, shots: k, step: std.format("%s_%s_%dshot", [m, t, k]) }
      for m in std.objectFields(models)
      for k in shots
      for t in std.objectFields(entries)
    ];
    local setting(object, field, default) = if std.objectHas(object, field) then object[field] else default;
    std.foldl(
      function(steps, r) steps + $.evaluate(
        r.step,
        models[r.model],
        entries[r.task].task + setting(tasks, r.task, {}) + { num_shots: r.shots },
        { split: setting(entries[r.task], "split", "validation") } + predict,
      ),
      runs,
      {},
    )
    + $.report(
      { [std.format("%s/%d-shot/%s", [r.model, r.shots, r.task])]: "metrics_" + r.step for r in runs },
      ["model", "shots", "task"],
      average_over="task",
    ),

  // OLMES v0.1's core suite (docs/tasks.md#olmes): every model of `models` (name -> spec or
  // ref) on each core task's cloze (rc) and lettered (mc) variant, with the unconditioned
  // requests the cloze variants make, in OLMES's table: per task each variant's primary score,
  // the better of the two, and their macro average per model. `tasks` (core task name ->
  // settings, e.g. data_files or limit) is merged into both variants' task configs;
  // `predict` holds catwalk::predict's other settings.
  olmes_tasks:: ["arc_challenge", "arc_easy", "boolq", "csqa", "hellaswag", "openbookqa", "piqa", "socialiqa", "winogrande"],
  olmes(models, tasks={}, predict={})::
    local runs = [
      { model: m, task: t, formulation: f, step: std.format("%s_%s_%s", [m, t, f]) }
      for m in std.objectFields(models)
      for t in $.olmes_tasks
      for f in ["rc", "mc"]
    ];
    std.foldl(
      function(steps, r) steps + $.evaluate(
        r.step,
        models[r.model],
        { type: "olmes", name: std.format("%s:%s::olmes", [r.task, r.formulation]) }
        + (if std.objectHas(tasks, r.task) then tasks[r.task] else {}),
        { unconditioned: true } + predict,
      ),
      runs,
      {},
    )
    + {
      table: {
        type: "catwalk::olmes_table",
        metrics: { [std.format("%s/%s/%s", [r.model, r.task, r.formulation])]: $.ref("metrics_" + r.step) for r in runs },
      },
      results: { type: "catwalk::print_metrics", table: $.ref("table"), title: "OLMES v0.1" },
    },

  // Fine-tune `model` on `task`, and score it before and after. `finetune` holds
  // catwalk::finetune's other settings, `predict` catwalk::predict's; `output_dir` as in `report`.
  // `baseline` (a run of the table: "<name>/zero-shot") compares the other run with it in the
  // table and, with `output_dir`, writes the instances that changed to its diffs/.
  finetune_and_evaluate(name, model, task, finetune, output_dir=null, predict={}, baseline=null)::
    local runs = { [name + "/zero-shot"]: "metrics_zero_shot", [name + "/fine-tuned"]: "metrics_finetuned" };
    local other = [run for run in std.objectFields(runs) if run != baseline];
    assert baseline == null || std.objectHas(runs, baseline) : "baseline must be one of " + std.join(", ", std.objectFields(runs));
    { finetune: { type: "catwalk::finetune", model: model, tasks: [task] } + finetune }
    + $.evaluate("zero_shot", model, task, predict)
    + $.evaluate("finetuned", $.ref("finetune"), task, predict)
    + $.report(
      runs,
      output_dir=output_dir,
      training={ [name + "/fine-tuned"]: "finetune" },
      baseline=baseline,
      diffs=if baseline == null then {} else {
        [std.strReplace(other[0], name + "/", "") + "_vs_" + std.strReplace(baseline, name + "/", "")]: [baseline, other[0]],
      },
    ),

  // What `python -m catwalk_steps.train` builds: fine-tune `model` on every task of `tasks`
  // ({name: task config}) at once, score the stock and the fine-tuned model on each task's
  // `splits[name]` (default "validation"), and compare them, paired, in one table. With
  // `output_dir`, each task of `diffs` (names of multiple-choice tasks) also gets the instances
  // that changed in output_dir/diffs/<task>_fine-tuned_vs_zero-shot.
  finetune_and_evaluate_tasks(model, tasks, finetune, predict={}, splits={}, output_dir=null, diffs=[])::
    local names = std.objectFields(tasks);
    local split(t) = { split: if std.objectHas(splits, t) then splits[t] else "validation" };
    { finetune: { type: "catwalk::finetune", model: model, tasks: [tasks[t] for t in names] } + finetune }
    + std.foldl(function(acc, t) acc
      + $.evaluate("zero_shot_" + t, model, tasks[t], split(t) + predict)
      + $.evaluate("finetuned_" + t, $.ref("finetune"), tasks[t], split(t) + predict), names, {})
    + $.report(
      { [t + "/zero-shot"]: "metrics_zero_shot_" + t for t in names }
      + { [t + "/fine-tuned"]: "metrics_finetuned_" + t for t in names },
      ["task", "run"],
      output_dir=output_dir,
      training={ "fine-tuned": "finetune" },
      baseline="zero-shot",
      diffs={ [t + "_fine-tuned_vs_zero-shot"]: [t + "/zero-shot", t + "/fine-tuned"] for t in diffs },
    ),

  // What `python -m catwalk_steps.evaluate` builds: every model of `models` (specs) on every task
  // of `tasks`, in one table whose rows are named by the specs as written (the step names have "_"
  // for "/"); with `baseline` (one of the specs) compared with it, and with `output_dir` too, each
  // task of `diffs` (multiple-choice task names) gets the instances that changed in
  // output_dir/diffs/<task>_<model>_vs_<baseline>.
  evaluate_tasks(models, tasks, predict={}, splits={}, output_dir=null, baseline=null, diffs=[])::
    local step_name(spec) = std.strReplace(spec, "/", "_");
    local runs = [{ model: m, task: t, step: step_name(m) + "_" + t } for m in models for t in std.objectFields(tasks)];
    std.foldl(function(acc, r) acc + $.evaluate(
      r.step, r.model, tasks[r.task],
      { split: if std.objectHas(splits, r.task) then splits[r.task] else "validation" } + predict,
    ), runs, {})
    + $.report({ [r.task + "/" + r.model]: "metrics_" + r.step for r in runs }, ["task", "model"],
               output_dir=output_dir, baseline=baseline,
               diffs=if baseline == null then {} else {
                 [t + "_" + step_name(m) + "_vs_" + step_name(baseline)]: [t + "/" + baseline, t + "/" + m]
                 for t in diffs for m in models if m != baseline
               }),

  // The cross product of `models` x `train_tasks` x `seeds` x `learning_rates` (models and
  // tasks are objects: name -> spec or task config), each fine-tuned model and each stock model
  // scored on every task of `eval_tasks`. Steps that do not depend on each other run in
  // parallel under `tango run --parallelism N`, or in many `tango run -s` processes (README).
  // `output_dir` and `chart` as in `report` (training.png draws every fine-tuned model's curves);
  // `predict` holds catwalk::predict's other settings. With an `optimizer` in `finetune`, each
  // learning rate goes into it as `lr` (else into `learning_rate`, the default optimizer's).
  // `seed_spread: true` (several seeds) adds each setting's mean, sd, min and max over its seeds;
  // `baseline` (a row without its task: "tiny/zero-shot/-/-", model/finetuned_on/seed/lr; under
  // seed_spread without its seed too: "tiny/zero-shot/-") compares every row with it, as in `report`.
  sweep(models, train_tasks, eval_tasks, seeds, learning_rates, finetune, output_dir=null, chart="acc", predict={},
        seed_spread=false, baseline=null)::
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
      } + (if std.objectHas(finetune, "optimizer") then {} else { learning_rate: g.lr })
      + finetune
      + (if std.objectHas(finetune, "optimizer") then { optimizer+: { lr: g.lr } } else {})
      for g in grid
    };
    local zero_shot = [{ model: m, eval: e, name: m + "-" + e } for m in std.objectFields(models) for e in std.objectFields(eval_tasks)];
    local finetuned = [g { eval: e, eval_name: g.name + "-" + e } for g in grid for e in std.objectFields(eval_tasks)];
    finetunes
    + std.foldl(function(acc, z) acc + $.evaluate("zero_shot_" + z.name, models[z.model], eval_tasks[z.eval], predict), zero_shot, {})
    + std.foldl(function(acc, f) acc + $.evaluate(f.eval_name, $.ref("finetune_" + f.name), eval_tasks[f.eval], predict), finetuned, {})
    + $.report(
      { [z.eval + "/" + z.model + "/zero-shot/-/-"]: "metrics_zero_shot_" + z.name for z in zero_shot }
      + { [std.format("%s/%s/%s/%d/%g", [f.eval, f.model, f.train, f.seed, f.lr])]: "metrics_" + f.eval_name for f in finetuned },
      ["task", "model", "finetuned_on", "seed", "lr"],
      output_dir=output_dir,
      chart=chart,
      training={ [g.name]: "finetune_" + g.name for g in grid },
      replicates=if seed_spread then "seed" else null,
      baseline=baseline,
    ),
}
