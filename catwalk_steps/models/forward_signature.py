"""What a model's ``forward`` accepts, which differs between transformers releases."""

import inspect
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def cache_keyword(lm: "PreTrainedModel") -> Optional[str]:
    """The argument ``lm.forward`` takes a key/value cache as: ``cache`` in newer transformers 5
    releases (where ``past_key_values`` warns, and goes in 5.40), ``past_key_values`` in 4.57 and
    early 5.x, which take no ``cache`` (4.57 would swallow it unused into ``**kwargs``)."""
    parameters = inspect.signature(lm.forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in parameters), None)


def accepts_logits_to_keep(lm: "PreTrainedModel") -> bool:
    return "logits_to_keep" in inspect.signature(lm.forward).parameters
