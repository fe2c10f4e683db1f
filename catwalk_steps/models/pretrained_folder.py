"""A fine-tuned model as a standard ``save_pretrained`` folder, which transformers'
``from_pretrained``, lm-evaluation-harness's ``--model hf`` and vLLM load as they are: its
config, its weights in safetensors, its generation config, and its tokenizer, with the chat
template it was trained under as the tokenizer's default and the special-token setting it was
trained with. An adapter's run writes a peft adapter folder (``adapter_config.json``,
``adapter_model.safetensors``, the tokenizer), or the base model with the adapter merged.

The folder is written beside its destination and renamed onto it, so a reader never sees half
of one, and a folder there before is replaced whole.
"""

import os
import shutil
import tempfile
from pathlib import Path

import torch

from .adapters import add_adapter, load_trained_state_dict
from .chat_templates import template_name
from .finetuned import FinetunedModel
from .weights import load_pretrained


def write_pretrained_folder(model: FinetunedModel, directory: Path, merge_adapter: bool = False) -> Path:
    """Writes ``model`` into ``directory`` (created, or replaced whole) and returns it."""
    directory = Path(directory).resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        if model.adapter is not None and not merge_adapter:
            lm = add_adapter(load_pretrained(model.spec), model.adapter)
            load_trained_state_dict(lm, model.state_dict)
        else:
            lm = model.load_model(torch.float32)
        lm.save_pretrained(staging, safe_serialization=True)
        trained_tokenizer(model).save_pretrained(staging)
        replace_folder(staging, directory)
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


def replace_folder(source: Path, target: Path) -> None:
    """``source`` renamed onto ``target``: a folder there before is moved aside first, then removed."""
    aside = None
    if target.exists():
        aside = target.with_name(f".{target.name}.replaced-{os.getpid()}")
        os.replace(target, aside)
    os.replace(source, target)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
