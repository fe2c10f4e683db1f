// The offline demo: a tiny GPT-2 built by `python -m catwalk_steps.tiny data/tiny`, fine-tuned
// on PIQA-format data from the same script, scored zero-shot and after fine-tuning.
// Runs on a fresh machine with no network:  tango run configs/piqa_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";

local task = {
  type: "piqa",
  data_files: { train: "data/tiny/train.jsonl", validation: "data/tiny/validation.jsonl" },
};

{
  steps: lib.finetune_and_evaluate("piqa-tiny", "rc::data/tiny/model", task, {
    batch_size: 16,
    train_epochs: 8,
    learning_rate: 1e-3,
    // Dropout is off: the data are clean, and a deterministic forward pass gives the same
    // numbers for any device_count (piqa_tiny_ddp.jsonnet trains this step on 2 processes).
    config_overrides: { resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0 },
    device_count: 1,
  }),
}
