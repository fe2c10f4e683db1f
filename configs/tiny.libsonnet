// The offline demo's models, tasks and fine-tuning settings (data/tiny, built by
// `python tools/build_tiny_data.py data/tiny`), shared by the tiny configs.
{
  models: { tiny: "rc::data/tiny/model", "tiny-small": "rc::data/tiny/model-small" },
  piqa: {
    type: "piqa",
    data_files: { train: "data/tiny/train.jsonl", validation: "data/tiny/validation.jsonl" },
  },
  // A task defined in the config alone: 4-choice questions about the same action-tool pairs.
  tools: {
    type: "template",
    data_files: { train: "data/tiny/tools_train.jsonl", validation: "data/tiny/tools_validation.jsonl" },
    context: "Question: {question}\nAnswer:",
    choices_field: "options",
    label_field: "answer",
    label_values: ["A", "B", "C", "D"],
  },
  // The core suite's tasks on local files (data/tiny/core: the same action-tool pairs in each
  // task's hub format), for lib.suite("core", ..., tasks=tiny.core).
  core: {
    [task]: { data_files: { [split]: std.format("data/tiny/core/%s_%s.jsonl", [task, split]) for split in ["train", "validation"] } }
    for task in ["arc_easy", "arc_challenge", "openbookqa", "hellaswag", "copa", "boolq", "sciq", "winogrande",
                 "commonsense_qa", "social_iqa"]
  } + {
    piqa: { data_files: $.piqa.data_files },
    mmlu: { data_files: { dev: "data/tiny/core/mmlu_dev.jsonl", test: "data/tiny/core/mmlu_test.jsonl" } },
  },
  // OLMES's core tasks on the same local files (lib.olmes(..., tasks=tiny.olmes)): a sample of
  // 8 docs each, drawn as OLMES draws its 1,000.
  olmes: {
    [task]: { data_files: { validation: std.format("data/tiny/core/%s_validation.jsonl", [task]) }, limit: 8 }
    for task in ["arc_challenge", "arc_easy", "boolq", "hellaswag", "openbookqa", "winogrande"]
  } + {
    csqa: { data_files: { validation: "data/tiny/core/commonsense_qa_validation.jsonl" }, limit: 8 },
    socialiqa: { data_files: { validation: "data/tiny/core/social_iqa_validation.jsonl" }, limit: 8 },
    piqa: { data_files: { validation: $.piqa.data_files.validation }, limit: 8 },
  },
  // Scoring settings: every choice also scored after "Answer:" alone, for acc_uncond.
  predict: { unconditioned: true },
  finetune: {
    batch_size: 16,
    // Two micro-batches of 8 per step: one after the other on 1 device, side by side on 2
    // (piqa_tiny_ddp.jsonnet). Same micro-batches, same dropout masks, same model.
    micro_batch_size: 8,
    train_epochs: 8,
    learning_rate: 1e-3,
    device_count: 1,
  },
}
