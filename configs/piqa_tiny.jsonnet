// The offline demo: a tiny GPT-2 fine-tuned on PIQA-format data, both shipped in data/tiny,
// scored zero-shot and after fine-tuning, the two compared paired on the same questions;
// predictions, table and the questions that changed also land in results/piqa-tiny.
// No network needed:
//   tango run configs/piqa_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{
  steps: lib.finetune_and_evaluate("piqa-tiny", tiny.models.tiny, tiny.piqa, tiny.finetune, output_dir="results/piqa-tiny",
                                   predict=tiny.predict, baseline="piqa-tiny/zero-shot"),
}
