// The offline demo's model fine-tuned two ways on the same data: every weight, and a LoRA
// adapter (only the adapter trains and is cached: a few KiB beside the model's weights). The
// demo model is random, so an adapter has little to adapt: it gains far less than the full
// fine-tune here (0.64 vs 0.95), unlike on a pretrained model (piqa_gpt2_lora.jsonnet).
//   tango run configs/piqa_tiny_lora.jsonnet -w workspace
// In the demo's workspace, the full fine-tune is reused (same cache key).
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

local finetune(settings) = { type: "catwalk::finetune", model: tiny.models.tiny, tasks: [tiny.piqa] } + settings;

{
  steps: {
    finetune: finetune(tiny.finetune),
    finetune_lora: finetune(tiny.finetune {
      // Every linear layer (without target_modules: GPT-2's default, c_attn alone).
      adapter: { type: "lora", r: 16, alpha: 32, dropout: 0.0, target_modules: ["c_attn", "c_proj", "c_fc"] },
      learning_rate: 3e-3,
    }),
  }
  + lib.evaluate("zero_shot", tiny.models.tiny, tiny.piqa)
  + lib.evaluate("full", lib.ref("finetune"), tiny.piqa)
  + lib.evaluate("lora", lib.ref("finetune_lora"), tiny.piqa)
  + lib.report({
    "piqa-tiny/zero-shot": "metrics_zero_shot",
    "piqa-tiny/full fine-tune": "metrics_full",
    "piqa-tiny/LoRA r=16": "metrics_lora",
  }),
}
