// Perplexity beside accuracy, offline: the tiny model, stock and fine-tuned on the demo's
// PIQA-format data (the demo's own fine-tuning step: same key, so a workspace that ran
// piqa_tiny.jsonnet trains nothing here), on three perplexity-type tasks over data/tiny/perplexity
// (a JSONL of texts, WikiText-format pages, LAMBADA-format passages) and on PIQA, in one table:
//   tango run configs/perplexity_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

local tasks = {
  documents: { type: "perplexity", data_files: { validation: "data/tiny/perplexity/documents.jsonl" } },
  wikitext: { type: "wikitext", data_files: { test: "data/tiny/perplexity/wikitext_test.jsonl" } },
  lambada: { type: "lambada", data_files: { test: "data/tiny/perplexity/lambada_test.jsonl" } },
  piqa: tiny.piqa,
};
local splits = { documents: "validation", wikitext: "test", lambada: "test", piqa: "validation" };
local models = { "zero-shot": tiny.models.tiny, "fine-tuned": lib.ref("finetune") };

{
  steps: { finetune: { type: "catwalk::finetune", model: tiny.models.tiny, tasks: [tiny.piqa] } + tiny.finetune }
    + std.foldl(
      function(steps, run) steps + lib.evaluate(run.model + "_" + run.task, models[run.model], tasks[run.task],
                                                { split: splits[run.task] }),
      [{ model: m, task: t } for m in std.objectFields(models) for t in std.objectFields(tasks)],
      {},
    )
    + lib.report(
      { [t + "/" + m]: "metrics_" + m + "_" + t for m in std.objectFields(models) for t in std.objectFields(tasks) },
      key_columns=["task", "model"],
    ),
}
