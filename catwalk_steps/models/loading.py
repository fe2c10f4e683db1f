"""Turning a model spec (``rc::gpt2``, ``rc::google/flan-t5-small``, ``rc::/path/to/dir``) into a
tokenizer and a causal LM or an encoder-decoder (seq2seq) LM."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from tango.common.exceptions import ConfigurationError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

SPEC_PREFIX = "rc::"


@dataclass(frozen=True)
class ModelSpec:
    """Where a rank-classification model's weights, config and tokenizer come from.

    ``pretrained`` is an HF hub name or a local directory saved with ``save_pretrained``;
    ``config_overrides`` are applied to its config on load (``{"resid_pdrop": 0.0}``).
    """

    pretrained: str
    tokenizer: Optional[str] = None
    config_overrides: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str, **kwargs: Any) -> "ModelSpec":
        if not spec.startswith(SPEC_PREFIX) or len(spec) == len(SPEC_PREFIX):
            raise ConfigurationError(
                f"Unknown model spec {spec!r}: write 'rc::<hub name or local directory>', e.g. 'rc::gpt2'"
            )
        name = spec[len(SPEC_PREFIX):]
        for local in (name, kwargs.get("tokenizer")):
            if local and local.startswith(("/", "./", "../", "~")) and not Path(local).expanduser().is_dir():
                raise ConfigurationError(f"Model spec {spec!r}: no such local directory: {local}")
        return cls(pretrained=name, **kwargs)

    def to_json(self) -> Dict[str, Any]:
        return {"pretrained": self.pretrained, "tokenizer": self.tokenizer, "config_overrides": self.config_overrides}

    def _source(self, name: str) -> str:
        # A relative local directory is resolved now so that DDP workers and later runs agree.
        path = Path(name).expanduser()
        return str(path.resolve()) if path.is_dir() else name

    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        name = self._source(self.tokenizer or self.pretrained)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise ConfigurationError(f"Cannot load tokenizer {name!r} (not a local directory or hub name?): {e}")
        if tokenizer.pad_token_id is None:
            # Padding positions are masked out; any id will do, and EOS is the usual choice.
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer

    def load_config(self):
        name = self._source(self.pretrained)
        try:
            return AutoConfig.from_pretrained(name, **self.config_overrides)
        except (OSError, ValueError) as e:
            raise ConfigurationError(f"Cannot load model {name!r} (not a local directory or hub name?): {e}")

    def load_model(self, state_dict: Optional[Dict[str, torch.Tensor]] = None) -> PreTrainedModel:
        """The pretrained model, with ``state_dict`` (e.g. fine-tuned weights) loaded strictly over
        it: an ``AutoModelForSeq2SeqLM`` for encoder-decoder configs (T5), else an
        ``AutoModelForCausalLM``."""
        config = self.load_config()
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        model = auto.from_pretrained(self._source(self.pretrained), config=config, dtype=torch.float32)
        if state_dict is not None:
            load_state_dict_strictly(model, state_dict)
        return model


def load_state_dict_strictly(model: torch.nn.Module, state_dict: Dict[str, torch.Tensor]) -> None:
    expected = model.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    mismatched = [k for k in expected if k in state_dict and state_dict[k].shape != expected[k].shape]
    if missing or unexpected or mismatched:
        def first(keys):
            return ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "") if keys else "none"

        raise ConfigurationError(
            f"State dict does not match {type(model).__name__}: missing keys: {first(missing)}; "
            f"unexpected keys: {first(unexpected)}; shape mismatches: {first(mismatched)}"
        )
    model.load_state_dict(state_dict, strict=True)


#: T5's training input length. Relative position buckets set no hard limit, so this is where
#: inputs are cut for T5-style models.
RELATIVE_POSITION_WINDOW = 512


def context_window(config) -> int:
    """The longest input the model takes, in tokens."""
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    if getattr(config, "relative_attention_num_buckets", None):
        return RELATIVE_POSITION_WINDOW
    raise ConfigurationError(f"Cannot tell the context window of a {type(config).__name__}")
