"""A fine-tuned model as a standard ``save_pretrained`` folder, which transformers'
``from_pretrained``, lm-evaluation-harness's ``--model hf`` and vLLM load as they are: its
config, its weights in safetensors, its generation config, and its tokenizer, with the chat
template it was trained under as the tokenizer's default and the special-token setting it was
trained with. An adapter's run writes a peft adapter folder (``adapter_config.json``,
``adapter_model.safetensors``, the tokenizer), or the base model with the adapter merged.

The folder is written beside its destination and published onto it (:func:`..storage.atomic.publish_dir`),
so a reader never sees half of one, and a folder there before is replaced whole.
"""

import shutil
from pathlib import Path

import torch

from ..storage.atomic import fresh_temp_dir, publish_dir
from .adapters import add_adapter, load_trained_state_dict
from .chat_templates import template_name
from .finetuned import FinetunedModel
from .weights import load_pretrained


def write_pretrained_folder(model: FinetunedModel, directory: Path, merge_adapter: bool = False) -> Path:
    """Writes ``model`` into ``directory`` (created, or replaced whole) and returns it."""
    directory = Path(directory).resolve()
    staging = fresh_temp_dir(directory)
    try:
        if model.adapter is not None and not merge_adapter:
            lm = add_adapter(load_pretrained(model.spec), model.adapter)
            load_trained_state_dict(lm, model.state_dict)
        else:
            lm = model.load_model(torch.float32)
        lm.save_pretrained(staging, safe_serialization=True)
        trained_tokenizer(model).save_pretrained(staging)
        publish_dir(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def trained_tokenizer(model: FinetunedModel):
    """The tokenizer as the model was trained with it: its special-token setting (a chat
    fine-tune's ``add_bos_token: false``), and the template it was trained under as its default."""
    tokenizer = model.spec.load_tokenizer()
    template = model.spec.chat_template
    if template is not None and isinstance(tokenizer.chat_template, dict):
        tokenizer.chat_template = tokenizer.chat_template[template_name(template) or "default"]
    return tokenizer
