// Another experiment on the demo's fine-tuned model: how it does on a second task (4-choice
// tool questions, defined in tiny.libsonnet from data files and a template alone). The
// fine-tuning step is the demo's, so in a workspace where piqa_tiny.jsonnet ran, nothing trains.
//   tango run configs/tools_tiny_transfer.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{
  steps: { finetune: { type: "catwalk::finetune", model: tiny.models.tiny, tasks: [tiny.piqa] } + tiny.finetune }
    + lib.evaluate("zero_shot", tiny.models.tiny, tiny.tools, tiny.predict)
    + lib.evaluate("finetuned", lib.ref("finetune"), tiny.tools, tiny.predict)
    + lib.evaluate("finetuned_piqa", lib.ref("finetune"), tiny.piqa, tiny.predict)
    + lib.report({
      "tools/zero-shot": "metrics_zero_shot",
      "tools/fine-tuned-on-piqa": "metrics_finetuned",
      "piqa/fine-tuned-on-piqa": "metrics_finetuned_piqa",
    }),
}
