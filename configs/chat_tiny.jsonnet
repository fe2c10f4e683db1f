// The chat demo: a tiny Llama-architecture model whose tokenizer adds BOS and carries a chat
// template (Zephyr's), fine-tuned on conversations (data/tiny/chat, TRL's `messages` rows: a
// system turn in some, one or two exchanges) and evaluated through its template before and
// after: each validation conversation's last assistant turn generated from the turns before it
// (exact match, F1). Fine-tuning learns every assistant turn as the template writes it, its
// end-of-turn token included, and nothing else. No network needed:
//   tango run configs/chat_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";

local model = "rc::data/tiny/chat-model";
local chat = {
  type: "generation",
  data_files: { train: "data/tiny/chat/train.jsonl", validation: "data/tiny/chat/validation.jsonl" },
  until: [],  // the template's end of turn (EOS) ends each answer
  max_new_tokens: 8,
};
local through_template = { apply_chat_template: true };

{
  steps: {
    finetune: {
      type: "catwalk::finetune",
      model: model,
      tasks: [chat],
      apply_chat_template: true,
      batch_size: 16,
      train_epochs: 12,
      learning_rate: 5e-3,
      val_metric: "exact_match",
    },
  }
  + lib.evaluate("zero_shot", model, chat, through_template)
  + lib.evaluate("fine_tuned", lib.ref("finetune"), chat, through_template)
  + lib.report({ "chat/zero-shot": "metrics_zero_shot", "chat/fine-tuned": "metrics_fine_tuned" },
               key_columns=["task", "run"]),
}
