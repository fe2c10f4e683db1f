"""Parameter-efficient fine-tuning with HF ``peft``: LoRA and IA3 adapters.

An adapter is given as a plain dict, ``{"type": "lora", "r": 8, "alpha": 16, "dropout": 0.05,
"target_modules": [...]}`` or ``{"type": "ia3", ...}``, so that it hashes into the cache key as
what it says. Any field of peft's ``LoraConfig``/``IA3Config`` may be given by its peft name;
``alpha`` and ``dropout`` are short for ``lora_alpha`` and ``lora_dropout``. Without
``target_modules`` peft picks its defaults for the architecture (GPT-2: ``c_attn`` for LoRA).
"""

from typing import TYPE_CHECKING, Any, Dict, Optional

import torch
from tango.common.exceptions import ConfigurationError

if TYPE_CHECKING:  # peft is imported where an adapter is built: a cached run never needs it
    from peft import PeftConfig, PeftModel
    from transformers import PreTrainedModel

Adapter = Dict[str, Any]
_KINDS = ("lora", "ia3")
_SHORT_NAMES = {"lora": {"alpha": "lora_alpha", "dropout": "lora_dropout"}, "ia3": {}}
_NOT_SETTINGS = {"task_type", "peft_type", "base_model_name_or_path", "revision", "inference_mode", "auto_mapping"}


def peft_config(adapter: Adapter, task_type: str = "CAUSAL_LM") -> "PeftConfig":
    """peft's config for ``adapter``, or a :class:`ConfigurationError` naming what is wrong."""
    kind = adapter.get("type")
    if kind not in _KINDS:
        raise ConfigurationError(f"adapter type must be one of {sorted(_KINDS)}, got {kind!r}")
    from peft import IA3Config, LoraConfig

    config_class = {"lora": LoraConfig, "ia3": IA3Config}[kind]
    allowed = set(config_class.__dataclass_fields__) - _NOT_SETTINGS
    settings = {_SHORT_NAMES[kind].get(k, k): v for k, v in adapter.items() if k != "type"}
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ConfigurationError(f"Unknown {kind} adapter settings {unknown}; peft's {config_class.__name__} takes e.g. "
                                 f"{', '.join(sorted(allowed)[:12])}, ...")
    try:
        return config_class(task_type=task_type, **settings)
    except (TypeError, ValueError) as e:
        raise ConfigurationError(f"Bad {kind} adapter settings {settings}: {e}") from None


def add_adapter(lm: "PreTrainedModel", adapter: Adapter) -> "PeftModel":
    """``lm`` with a fresh adapter; only the adapter's weights require gradients."""
    from peft import get_peft_model

    try:
        task_type = "SEQ_2_SEQ_LM" if lm.config.is_encoder_decoder else "CAUSAL_LM"
        return get_peft_model(lm, peft_config(adapter, task_type))
    except ValueError as e:  # e.g. target modules the model does not have
        hint = ""
        if "target_modules" in str(e) and "target_modules" not in adapter:
            hint = (f"; peft knows no default modules for model type {lm.config.model_type!r}: name them, e.g. "
                    "target_modules: [\"q_proj\", \"v_proj\"], or \"all-linear\" for every linear layer")
        raise ConfigurationError(f"Cannot add the {adapter['type']} adapter to {type(lm).__name__}: {e}{hint}") from None


def load_trained_state_dict(lm: torch.nn.Module, state_dict: Dict[str, torch.Tensor]) -> None:
    from peft import PeftModel, set_peft_model_state_dict

    if isinstance(lm, PeftModel):
        result = set_peft_model_state_dict(lm, state_dict)
        missing = [k for k in result.missing_keys if "lora_" in k or "ia3_" in k]
        if result.unexpected_keys or missing:
            raise ConfigurationError(f"Adapter weights do not fit: missing {missing[:5]}, unexpected "
                                     f"{result.unexpected_keys[:5]}")
    else:
        lm.load_state_dict(state_dict, strict=True)


def with_adapter_merged(lm: "PreTrainedModel", adapter: Adapter, weights: Dict[str, torch.Tensor],
                        dtype: Optional[torch.dtype] = None) -> "PreTrainedModel":
    """``lm`` with trained adapter ``weights`` merged into its own (so scoring costs what the
    base model costs)."""
    peft_model = add_adapter(lm, adapter)
    load_trained_state_dict(peft_model, {k: v.to(dtype) if dtype and v.is_floating_point() else v
                                         for k, v in weights.items()})
    return peft_model.merge_and_unload().eval()
