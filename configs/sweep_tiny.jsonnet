// An offline sweep: 2 tiny models x 1 training task x 2 seeds x 1 learning rate, every
// fine-tuned and every stock model scored on 2 tasks, in one table (printed at the end), written
// with every run's predictions and a chart of accuracy (acc.png) to results/sweep-tiny:
//   tango run configs/sweep_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{
  steps: lib.sweep(
    models=tiny.models,
    train_tasks={ piqa: tiny.piqa },
    eval_tasks={ piqa: tiny.piqa, tools: tiny.tools },
    seeds=[1, 2],
    learning_rates=[3e-3],
    finetune=tiny.finetune { train_epochs: 3 },
    output_dir="results/sweep-tiny",
    predict=tiny.predict,
  ),
}
