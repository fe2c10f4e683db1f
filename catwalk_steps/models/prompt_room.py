"""A generation's token budget against the model's context window: the prompt gets what the
budget leaves (``max_length - max_new_tokens``; an encoder-decoder's encoder reads a window of
its own, :meth:`.generation.GenerationRequest.room`), cut from the left as lm-evaluation-harness
cuts it. Checked once the window is known (the model's config, read before any weights):

- no room at all is refused;
- room for fewer than :data:`MIN_PROMPT_TOKENS` tokens is refused when a prompt would be cut to
  it: a prompt cut that short keeps no question, only its last few tokens, and every score
  would be of that (the fix, a lower ``max_new_tokens``, costs nothing);
- any other cut is lm-evaluation-harness's convention: a warning counts the prompts cut (each
  record says ``truncated``).
"""

import logging
from typing import TYPE_CHECKING, Any, List, Sequence

from tango.common.exceptions import ConfigurationError

from .generation import GenerationRequest

if TYPE_CHECKING:
    from .conventions import TokenConventions

logger = logging.getLogger(__name__)

#: The fewest prompt tokens a budget may leave when prompts are longer than that.
MIN_PROMPT_TOKENS = 16


def generation_requests(
    conventions: "TokenConventions", instances: Sequence[Any], max_length: int
) -> List[GenerationRequest]:
    """Each instance's prompt as tokens (:meth:`.conventions.TokenConventions.prompt`), with its
    stop strings and budget (``max_new_tokens``), checked against the model's ``max_length``
    tokens as the module says."""
    requests = [
        GenerationRequest(conventions.prompt(i.prompt), tuple(i.until), i.max_new_tokens, conventions.encoder_decoder)
        for i in instances
    ]
    room = min((r.room(max_length) for r in requests), default=max_length)
    budget = max_length - room
    if room < 1:
        raise ConfigurationError(
            f"max_new_tokens={budget} leaves no room for a prompt in the model's context window of {max_length} "
            "tokens: lower max_new_tokens"
        )
    cut = [len(r.prompt) for r in requests if len(r.prompt) > r.room(max_length)]
    if cut and room < MIN_PROMPT_TOKENS:
        raise ConfigurationError(
            f"max_new_tokens={budget} leaves {room} of the model's {max_length} tokens for the prompt, and "
            f"{len(cut)} of {len(requests)} prompts are longer (up to {max(cut)} tokens): each would be cut to its "
            f"last {room}; lower max_new_tokens to at most {max_length - MIN_PROMPT_TOKENS}"
        )
    if cut:
        room_of = (f"an encoder's input of {max_length} holds" if conventions.encoder_decoder
                   else f"max_new_tokens={budget} leaves of the model's {max_length}")
        logger.warning(
            "%d of %d prompts are longer than the %d tokens %s: they are cut from the left (truncated: true in their "
            "records)", len(cut), len(requests), room, room_of,
        )
    return requests
