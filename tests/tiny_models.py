"""Tiny random models of today's architectures with real tokenizers, built offline.

The BOS-adding tokenizer is Mistral-7B v0.1's SentencePiece model, which the ``mistral-common``
wheel ships (``mistral_common/data/tokenizer.model.v1``, Apache-2.0): converted here to a fast
tokenizer with the settings of its hub ``tokenizer_config.json`` (``add_bos_token: true``, no pad
token), as ``AutoTokenizer`` would load ``mistralai/Mistral-7B-v0.1``.
"""

import json
import shutil
from pathlib import Path
from typing import Sequence

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


#: Today's decoder-only architectures by transformers' ``model_type``, each with the settings a
#: tiny random model of it needs beside :data:`DECODER_SHAPE`; and T5, an encoder-decoder.
DECODER_SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=128)
ARCHITECTURES = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {"head_dim": 8}, "olmo2": {}, "gemma2": {"head_dim": 8},
    "phi3": {"pad_token_id": None}, "gpt2": "gpt2", "t5": "t5",
}


def tiny_architecture(directory: Path, model_type: str, tokenizer: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer model of ``model_type`` (``ARCHITECTURES``) saved with
    ``tokenizer``'s files, built from transformers' own config class for it."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    # Embedding rows to spare beyond the tokenizer's, as real models have: transformers gives a
    # Qwen2 model Qwen2's tokenizer class, which adds a pad token of its own.
    ids = dict(vocab_size=len(tok) + 16, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if model_type == "gpt2":
        config = AutoConfig.for_model("gpt2", n_embd=32, n_layer=2, n_head=4, n_positions=128, **ids)
    elif model_type == "t5":
        config = AutoConfig.for_model("t5", d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                      decoder_start_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id, **ids)
    else:
        config = AutoConfig.for_model(model_type, **DECODER_SHAPE, **ids, **ARCHITECTURES[model_type])
    torch.manual_seed(seed)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_config(config)
    with torch.no_grad():  # logits spread wide enough that greedy decisions are not near-ties
        model.get_output_embeddings().weight.mul_(20.0 if config.tie_word_embeddings else 10.0)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def tiny_bart(directory: Path, tokenizer: Path, window: int = 64) -> Path:
    """A randomly initialised 1-layer BART (learned positions: a table of ``window`` rows; its
    encoder's and decoder's embeddings and its output layer tied to one shared matrix) saved in
    ``directory`` with ``tokenizer``'s files."""
    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(tokenizer)
    eos = tok.eos_token_id
    config = BartConfig(vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_position_embeddings=window, pad_token_id=eos, bos_token_id=eos, eos_token_id=eos,
                        decoder_start_token_id=eos, forced_eos_token_id=None)
    torch.manual_seed(0)
    BartForConditionalGeneration(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def t5_tokenizer(directory: Path, texts: Sequence[str]) -> Path:
    """A T5-style tokenizer, saved in ``directory``: a SentencePiece unigram model trained here on
    ``texts`` (a ``▁`` before each word, the first too: ``"4"`` alone is ``['▁', '4']``), ``</s>``
    ending every encoding, ``<pad>`` and ``<unk>``, no BOS, a ``model_max_length`` of 512 (T5's),
    loaded by ``AutoTokenizer`` as T5's own class."""
    from tokenizers import SentencePieceUnigramTokenizer
    from tokenizers.processors import TemplateProcessing

    tokenizer = SentencePieceUnigramTokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                  show_progress=False)
    tokenizer.post_processor = TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                  special_tokens=[("</s>", tokenizer.token_to_id("</s>"))])
    return _saved_tokenizer(directory, tokenizer, {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>",
                                                   "pad_token": "<pad>", "unk_token": "<unk>", "extra_ids": 0,
                                                   "model_max_length": 512})


def bart_tokenizer(directory: Path, base: Path) -> Path:
    """A BART-style tokenizer, saved in ``directory``: ``base``'s byte-level BPE (the demo's) with
    BART's special tokens, every encoding ``<s> ... </s>``, loaded by ``AutoTokenizer`` as BART's
    own class."""
    from tokenizers import Tokenizer
    from tokenizers.processors import RobertaProcessing

    tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
    tokenizer.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.post_processor = RobertaProcessing(("</s>", tokenizer.token_to_id("</s>")),
                                                 ("<s>", tokenizer.token_to_id("<s>")))
    return _saved_tokenizer(directory, tokenizer, {"tokenizer_class": "BartTokenizer", "bos_token": "<s>",
                                                   "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                                                   "mask_token": "<mask>"})


def _saved_tokenizer(directory: Path, tokenizer, settings: dict) -> Path:
    """``tokenizer`` (a ``tokenizers.Tokenizer``) as a hub tokenizer is laid out: its
    ``tokenizer.json`` and a ``tokenizer_config.json`` of ``settings``."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    return directory
