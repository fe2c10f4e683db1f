// GPT-2 (124M) from the HF hub on PIQA from the hub (lm-evaluation-harness's parquet copy,
// baber/piqa): fine-tuned, and the zero-shot baseline beside it. Needs the hub, or both in the
// local HF cache. Reference: zero-shot acc 0.626-0.629 (lm-evaluation-harness, catwalk);
// GPT-2 small fine-tuned 0.692 (Bisk et al., 2020).
//   tango run configs/piqa_gpt2.jsonnet -w workspace
local lib = import "lib.libsonnet";

{
  steps: lib.finetune_and_evaluate("piqa/gpt2", "rc::gpt2", "piqa", {
    batch_size: 32,
    micro_batch_size: 16,  // per device: 2 micro-batches on 1 GPU, 1 each on 2 (same model)
    train_epochs: 3,
    learning_rate: 2e-5,
    device_count: 1,
  }),
}
