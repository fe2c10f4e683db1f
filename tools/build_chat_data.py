"""Builds the offline chat demo: chat data about the demo's tools and a tiny Llama-architecture
model whose tokenizer adds BOS, has no pad token and carries a chat template (Zephyr's).

``chat/train.jsonl`` and ``chat/validation.jsonl`` hold conversations as TRL's ``SFTTrainer``
takes them (``{"messages": [...]}``): a system turn in some, one or two exchanges (the second
asks for another job's tool). ``chat-model/`` is a randomly initialised 2-layer Llama (RoPE,
grouped-query attention) with a byte-level BPE tokenizer trained on the conversations as the
template writes them. No network is needed:

    python tools/build_chat_data.py data/tiny
"""

import argparse
import json
import random
from pathlib import Path
from typing import Dict, List

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from build_tiny_data import OBJECTS, TOOLS

BOS, EOS = "<s>", "</s>"
#: HuggingFaceH4/zephyr-7b-beta's chat template: system, user and assistant turns, each closed by EOS.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
SYSTEM = "You name the tool for a job, in a few words."


def make_conversations(count: int, rng: random.Random) -> List[Dict]:
    rows = []
    for _ in range(count):
        first, second = rng.sample(sorted(TOOLS), 2)
        messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.5 else []
        messages += [{"role": "user", "content": f"What do you use to {first} {rng.choice(OBJECTS)}?"},
                     {"role": "assistant", "content": TOOLS[first]}]
        if rng.random() < 0.5:
            messages += [{"role": "user", "content": f"And to {second} it?"},
                         {"role": "assistant", "content": TOOLS[second]}]
        rows.append({"messages": messages})
    return rows


def build_tokenizer(texts: List[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer that adds BOS (as Llama's and Mistral's do), with no pad token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, unk_token=EOS)
    fast.chat_template = ZEPHYR_TEMPLATE
    return fast


def build(out: Path, train_size: int = 256, validation_size: int = 64, seed: int = 0) -> None:
    rng = random.Random(seed)
    splits = {"train": make_conversations(train_size, rng), "validation": make_conversations(validation_size, rng)}
    (out / "chat").mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (out / "chat" / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    texts = ["".join(f"<|{m['role']}|>\n{m['content']}{EOS}\n" for m in row["messages"]) for row in splits["train"]]
    tokenizer = build_tokenizer(texts, vocab_size=512)
    directory = out / "chat-model"
    tokenizer.save_pretrained(directory)
    # The class every supported transformers knows (5.x writes its own "TokenizersBackend").
    settings = directory / "tokenizer_config.json"
    config = {**json.loads(settings.read_text()), "tokenizer_class": "PreTrainedTokenizerFast"}
    config.pop("backend", None)
    settings.write_text(json.dumps(config, indent=2) + "\n")
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(directory)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    build(parser.parse_args().out)
