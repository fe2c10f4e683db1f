"""Tiny random models of today's architectures with real tokenizers, built offline.

The BOS-adding tokenizer is Mistral-7B v0.1's SentencePiece model, which the ``mistral-common``
wheel ships (``mistral_common/data/tokenizer.model.v1``, Apache-2.0): converted here to a fast
tokenizer with the settings of its hub ``tokenizer_config.json`` (``add_bos_token: true``, no pad
token), as ``AutoTokenizer`` would load ``mistralai/Mistral-7B-v0.1``.
"""

import shutil
from pathlib import Path

import torch


def mistral_tokenizer(directory: Path) -> Path:
    """Mistral-7B v0.1's tokenizer (32,000 tokens, BOS ``<s>`` = 1, EOS ``</s>`` = 2, no pad),
    saved in ``directory``."""
    import mistral_common
    from transformers import LlamaTokenizer

    source = directory / "sentencepiece"
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1", source / "tokenizer.model")
    tokenizer = LlamaTokenizer.from_pretrained(source, add_bos_token=True, add_eos_token=False)
    assert tokenizer.encode("Hello") == [1, 22557] and tokenizer.pad_token_id is None
    tokenizer.save_pretrained(directory)
    shutil.rmtree(source)
    return directory


def tiny_llama(directory: Path, tokenizer: Path, window: int = 128, seed: int = 0) -> Path:
    """A randomly initialised 2-layer Llama (RoPE, grouped-query attention) saved in ``directory``
    with ``tokenizer``'s files beside its weights, as a hub model is laid out."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=window, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random logits spread wide enough that greedy decisions are not ties
        model.lm_head.weight.normal_(0, 0.5)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


#: HuggingFaceH4/zephyr-7b-beta's chat template (a Mistral-7B fine-tune, so Mistral's tokenizer):
#: system, user and assistant turns, each closed by EOS.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
#: mistralai/Mistral-7B-Instruct-v0.1's: BOS written by the template itself, no system turn.
MISTRAL_INSTRUCT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)


def chat_tokenizer(directory: Path, base: Path) -> Path:
    """``base`` (Mistral's tokenizer) with Zephyr's chat template as its default and Mistral
    Instruct's as the template named ``mistral``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.chat_template = {"default": ZEPHYR_TEMPLATE, "mistral": MISTRAL_INSTRUCT_TEMPLATE}
    tokenizer.save_pretrained(directory)
    return directory
