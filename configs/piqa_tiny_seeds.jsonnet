// Seeds as replicates: the demo's fine-tuning with three seeds, each seed's row, their mean,
// standard deviation and range, and every row compared, paired, with the stock model
// (README: Seeds as replicates). Offline:
//   tango run configs/piqa_tiny_seeds.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{
  steps: lib.sweep(
    models={ tiny: tiny.models.tiny },
    train_tasks={ piqa: tiny.piqa },
    eval_tasks={ piqa: tiny.piqa },
    seeds=[1, 2, 3],
    learning_rates=[1e-3],
    finetune=tiny.finetune,
    predict=tiny.predict,
    output_dir="results/piqa-tiny-seeds",
    seed_spread=true,
    baseline="tiny/zero-shot/-",
  ),
}
