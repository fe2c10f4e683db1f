// The preference demo: the chat demo's tiny Llama-architecture model (its tokenizer adds BOS and
// carries Zephyr's chat template) tuned by DPO, as TRL's DPOTrainer runs it, on preference pairs
// about the demo's tools (data/tiny/preference: a conversation, the right tool as the chosen
// answer and another tool as the rejected one), then evaluated on the held-out pairs before and
// after: how often the chosen answer is the likelier (pair_acc, compared by McNemar's test), the
// mean log-probability margin, and DPO's implicit rewards against the starting model
// (reward_acc, reward_margin). No network needed:
//   tango run configs/dpo_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";

local model = "rc::data/tiny/chat-model";
local pairs = {
  type: "preference",
  data_files: { train: "data/tiny/preference/train.jsonl", validation: "data/tiny/preference/validation.jsonl" },
};
local scored = { apply_chat_template: true, reference_model: model };

{
  steps: {
    finetune: {
      type: "catwalk::finetune",
      model: model,
      tasks: [pairs],
      apply_chat_template: true,
      beta: 0.1,
      loss_type: "sigmoid",
      batch_size: 16,
      train_epochs: 3,
      learning_rate: 5e-3,
      val_metric: "rewards/accuracies",
    },
  }
  + lib.evaluate("zero_shot", model, pairs, scored)
  + lib.evaluate("dpo", lib.ref("finetune"), pairs, scored)
  + lib.report({ "pairs/zero-shot": "metrics_zero_shot", "pairs/dpo": "metrics_dpo" }, key_columns=["task", "run"]),
}
