// GPT-2 (124M) from the HF hub on PIQA, fine-tuned with a LoRA adapter beside the full
// fine-tune of piqa_gpt2.jsonnet: the cache holds the adapter alone (~1% of the model), and
// scoring merges it into the base weights. Needs the hub, or both in the local HF cache.
//   tango run configs/piqa_gpt2_lora.jsonnet -w workspace
// For 7B-class models add `precision: "bf16-mixed"`, `gradient_checkpointing: true` and, on
// several GPUs, `device_count: N` with `strategy: "fsdp"`.
local lib = import "lib.libsonnet";

{
  steps: lib.finetune_and_evaluate("piqa/gpt2-lora", "rc::gpt2", "piqa", {
    adapter: { type: "lora", r: 16, alpha: 32, dropout: 0.05 },
    batch_size: 32,
    micro_batch_size: 16,
    train_epochs: 3,
    learning_rate: 3e-4,
    device_count: 1,
  }),
}
