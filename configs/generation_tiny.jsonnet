// The generative demo: the tiny GPT-2 fine-tuned to answer the tool questions of
// data/tiny/generation by generating the tool (cross-entropy on the answer and EOS; the best
// validation by exact match), scored before and after by greedy generation (exact match, F1)
// and by perplexity: of the validation questions answered (the answers are what it learned; the
// questions it was never trained to predict, so their perplexity may rise) and of other text
// about the same tools (data/tiny/perplexity). Predictions and table also land in
// results/generation-tiny. No network needed:
//   tango run configs/generation_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

local model = tiny.models.tiny;
local tasks = {
  generation: {
    type: "generation",
    data_files: { train: "data/tiny/generation/train.jsonl", validation: "data/tiny/generation/validation.jsonl" },
    until: ["\n"],
    max_new_tokens: 8,  // the tiny model's window is 64 tokens
  },
  "answered-questions": { type: "perplexity", data_files: { validation: "data/tiny/generation/answered.jsonl" } },
  "tool-texts": { type: "perplexity", data_files: { validation: "data/tiny/perplexity/documents.jsonl" } },
};
local runs = { "zero-shot": model, "fine-tuned": lib.ref("finetune") };
local step(task, run) = std.strReplace(task + "_" + run, "-", "_");

{
  steps: {
    finetune: {
      type: "catwalk::finetune",
      model: model,
      tasks: [tasks.generation],
      batch_size: 16,
      train_epochs: 8,
      learning_rate: 3e-3,
      validate_every: 32,
      val_metric: "exact_match",
      config_overrides: { resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0 },  // learns faster
    },
  }
  + std.foldl(function(steps, s) steps + lib.evaluate(step(s[0], s[1]), runs[s[1]], tasks[s[0]]),
              [[t, r] for t in std.objectFields(tasks) for r in std.objectFields(runs)], {})
  + lib.report(
    { [t + "/" + r]: "metrics_" + step(t, r) for t in std.objectFields(tasks) for r in std.objectFields(runs) },
    key_columns=["task", "run"],
    output_dir="results/generation-tiny",
    training={ "generation/fine-tuned": "finetune" },
  ),
}
