// Named suites: each a list of (task, settings) that `lib.suite(name, ...)` sweeps in one line.
// An entry is `task` (a task config) and optionally `split` (default "validation").
{
  // Every registered task, each on the split its published numbers use.
  core: {
    piqa: { task: { type: "piqa" } },
    arc_easy: { task: { type: "arc_easy" } },
    arc_challenge: { task: { type: "arc_challenge" } },
    openbookqa: { task: { type: "openbookqa" } },
    hellaswag: { task: { type: "hellaswag" } },
    copa: { task: { type: "copa" } },
    boolq: { task: { type: "boolq" } },
    sciq: { task: { type: "sciq" } },
    winogrande: { task: { type: "winogrande" } },
    commonsense_qa: { task: { type: "commonsense_qa" } },
    social_iqa: { task: { type: "social_iqa" } },
    mmlu: { task: { type: "mmlu" }, split: "test" },
  },
}
