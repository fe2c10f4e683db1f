// The offline demo's model fine-tuned with three optimizer/schedule settings, as any Tango
// torch::train config spells them: the default (AdamW + linear warm-up, the demo's own step,
// reused from its workspace), AdamW with weight decay and a cosine schedule with warm-up, stopping
// early after 2 validations without a better accuracy, and SGD with momentum + StepLR. Each is
// its own cache key; results/piqa-tiny-optimizers/ gets the table, acc.png and training.png (the
// loss and validation accuracy of each run against the step).
//   tango run configs/piqa_tiny_optimizers.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

local finetune(settings) = { type: "catwalk::finetune", model: tiny.models.tiny, tasks: [tiny.piqa] } + settings;
// learning_rate belongs to the default optimizer: the others carry their own lr.
local without_lr = { [k]: tiny.finetune[k] for k in std.objectFields(tiny.finetune) if k != "learning_rate" };

{
  steps: {
    finetune: finetune(tiny.finetune),
    finetune_cosine: finetune(without_lr {
      optimizer: { type: "torch::AdamW", lr: 1e-3, weight_decay: 0.01 },
      lr_scheduler: { type: "catwalk::cosine_with_warmup", warmup_fraction: 0.1 },
      validate_every: 8,
      patience: 2,
    }),
    finetune_sgd: finetune(without_lr {
      optimizer: { type: "torch::SGD", lr: 0.05, momentum: 0.9 },
      lr_scheduler: { type: "torch::StepLR", step_size: 32, gamma: 0.5 },
    }),
  }
  + lib.evaluate("default", lib.ref("finetune"), tiny.piqa, tiny.predict)
  + lib.evaluate("cosine", lib.ref("finetune_cosine"), tiny.piqa, tiny.predict)
  + lib.evaluate("sgd", lib.ref("finetune_sgd"), tiny.piqa, tiny.predict)
  + lib.report(
    {
      "piqa-tiny/AdamW, linear warm-up": "metrics_default",
      "piqa-tiny/AdamW wd 0.01, cosine, patience 2": "metrics_cosine",
      "piqa-tiny/SGD momentum, StepLR": "metrics_sgd",
    },
    output_dir="results/piqa-tiny-optimizers",
    chart="acc",
    training={
      "AdamW, linear warm-up": "finetune",
      "AdamW wd 0.01, cosine, patience 2": "finetune_cosine",
      "SGD momentum, StepLR": "finetune_sgd",
    },
  ),
}
