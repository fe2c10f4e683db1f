"""Chat data as training sequences, token for token as TRL 1.16's ``SFTTrainer`` makes them at
its defaults: one sequence per row, and a mask of the tokens its loss learns.

- A conversation (a ``messages`` row, a prompt/completion row of turns, or any row under a chat
  template) is the template's text encoded without special tokens (TRL's
  ``apply_chat_template(tokenize=True)``): a template that writes no BOS gets none.
- A prompt/completion row of plain strings is ``prompt + completion + EOS`` encoded whole with
  the tokenizer's special tokens (TRL's ``processing_class(text=...)``).
- A prompt/completion row learns its completion (``completion_only_loss``, on by default as in
  TRL): the tokens after the longest common prefix of the prompt's encoding (with the generation
  prompt) and the whole row's, so whitespace that the tokenizer joins to the completion's first
  word is learnt with it, never as a token of its own.
- A ``messages`` row learns its assistant turns by default: each turn from where the template's
  generation prompt before it ends (the same common-prefix rule) to where the conversation up to
  it ends, end-of-turn tokens included (a token merged across that end included, as transformers'
  ``{% generation %}`` mask includes it). TRL learns every token of such a row unless
  ``assistant_only_loss``; ``assistant_only_loss: false`` asks for that, and ``true`` for TRL's
  mask from the template's ``{% generation %}`` markers.

The loss never learns a row's first token (nothing predicts it), and TRL's label count skips it
too: the first learnt token is at position 1 or later.
"""

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from tango.common.exceptions import ConfigurationError

from ..models.chat_templates import template_name
from ..models.conventions import common_prefix

if TYPE_CHECKING:
    from ..models.conventions import TokenConventions
    from ..tasks import GenerationInstance

logger = logging.getLogger(__name__)

#: TRL's ``has_generation_markers``: a template that marks its assistant text for the loss mask.
GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")

Tokens = Tuple[List[int], List[bool]]


@dataclass(frozen=True)
class LearntTokens:
    """Which tokens of a row the loss learns: TRL's ``completion_only_loss`` (prompt/completion
    rows; ``None``: on) and ``assistant_only_loss`` (``None``: each assistant turn of a
    ``messages`` row, this project's default; ``True``: the template's ``{% generation %}``
    mask, TRL's; ``False``: every token of a ``messages`` row, TRL's default)."""

    completion_only_loss: Optional[bool] = None
    assistant_only_loss: Optional[bool] = None


def check_learnt_tokens_apply(learnt: LearntTokens, instances: Iterable["GenerationInstance"], encoder_decoder: bool) -> None:
    """Refuses, before any model loads, a setting of ``learnt`` that no row of the data takes (it
    would get a cache key of its own and train the same weights bit for bit): ``completion_only_loss``
    is for prompt/completion rows, ``assistant_only_loss: false`` for ``messages`` rows,
    ``assistant_only_loss: true`` for conversations."""
    rows = list(instances)

    def any_row(takes: Callable[["GenerationInstance"], bool]) -> bool:
        return any(takes(row) for row in rows)

    def refuse(setting: str, rows_it_is_for: str) -> ConfigurationError:
        return ConfigurationError(f"{setting} is for {rows_it_is_for}, and the data has none: what its rows learn "
                                  f"is {learnt_by_default(rows, encoder_decoder)}; leave it unset")

    if learnt.completion_only_loss is not None and not any_row(lambda row: prompt_completion(row, encoder_decoder)):
        raise refuse(f"completion_only_loss: {str(learnt.completion_only_loss).lower()}", "prompt/completion rows")
    if learnt.assistant_only_loss is False and not any_row(lambda row: row.messages is not None and row.prompt_turns is None):
        raise refuse("assistant_only_loss: false", "messages rows (it learns their every token)")
    if learnt.assistant_only_loss and not any_row(lambda row: row.messages is not None):
        raise refuse("assistant_only_loss: true", "conversations (it learns what the template marks in them)")


def prompt_completion(row: "GenerationInstance", encoder_decoder: bool) -> bool:
    """A prompt/completion row as :func:`row_tokens` learns it (``completion_only_loss``)."""
    return row.prompt_turns is not None or (row.messages is None and row.completion_row and not encoder_decoder)


def learnt_by_default(rows: List["GenerationInstance"], encoder_decoder: bool) -> str:
    """What the first row learns, in words, for a message about a setting it does not take."""
    if not rows:
        return "nothing (no rows)"
    if rows[0].messages is not None and rows[0].prompt_turns is None:
        return "each assistant turn of a messages row (assistant_only_loss: true or false says otherwise)"
    if prompt_completion(rows[0], encoder_decoder):
        return "a prompt/completion row's completion (completion_only_loss: false says every token)"
    return "a prompt's answer (a prompt/answers row, not chat data)"


def check_generation_markers(tokenizer: Any, template: Union[bool, str], model: str) -> None:
    """Raises unless ``template`` marks its assistant text (for ``assistant_only_loss: true``)."""
    source = tokenizer.chat_template
    if isinstance(source, dict):
        source = source[template_name(template) or "default"]
    if not GENERATION_MARKER.search(source or ""):
        raise ConfigurationError(
            f"assistant_only_loss: true learns what the chat template of {model} marks with "
            "{% generation %}...{% endgeneration %}, and it marks nothing (TRL swaps in its own patched copy of some "
            "templates; give the tokenizer such a template, or leave assistant_only_loss unset to learn each "
            "assistant turn as the template writes it)"
        )


def row_tokens(
    instance: "GenerationInstance", conventions: "TokenConventions", render: Optional[Callable[..., str]],
    template: Union[bool, str], learnt: LearntTokens,
) -> Tokens:
    """The training sequence of a chat-data ``instance`` and the mask of the tokens its loss
    learns (``render``: the chat template, strict, for a conversation)."""
    if instance.messages is not None:
        messages = [{"role": role, "content": content} for role, content in instance.messages]
        return conversation_tokens(conventions.tokenizer, render, template, messages, instance.prompt_turns, learnt)
    return completion_tokens(conventions, instance.prompt, instance.references[0], learnt)


def completion_tokens(conventions: "TokenConventions", prompt: str, completion: str, learnt: LearntTokens) -> Tokens:
    """A plain prompt/completion row: EOS appended as text (unless there), encoded whole."""
    eos = conventions.tokenizer.eos_token
    if eos is None:
        raise ConfigurationError(
            f"A prompt/completion row ends with the tokenizer's EOS, so that the model learns to stop, and the "
            f"tokenizer of {conventions.tokenizer.name_or_path} has none: give the model a tokenizer with an eos_token"
        )
    ids = conventions.encode(prompt + completion + ("" if completion.endswith(eos) else eos))
    start = 0 if learnt.completion_only_loss is False else common_prefix(conventions.encode(prompt), ids)
    return ids, [k >= start for k in range(len(ids))]


def conversation_tokens(
    tokenizer: Any, render: Callable[..., str], template: Union[bool, str], messages: List[Dict[str, str]],
    prompt_turns: Optional[int], learnt: LearntTokens,
) -> Tokens:
    """A conversation's tokens and learnt mask; ``prompt_turns``: how many turns are the prompt
    of a prompt/completion row (``None`` for a ``messages`` row)."""

    def encode(text: str) -> List[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    text = render(messages, False, continue_final_message=False)
    ids = encode(text)
    masks = []
    if prompt_turns is not None:
        if learnt.completion_only_loss is not False:
            start = common_prefix(encode(render(messages[:prompt_turns], True)), ids)
            masks.append([k >= start for k in range(len(ids))])
    elif learnt.assistant_only_loss is None:
        masks.append(assistant_turns_mask(encode, render, messages, text, ids))
    if learnt.assistant_only_loss:
        masks.append(generation_mask(tokenizer, template, messages, ids))
    return ids, [all(bits) for bits in zip(*masks)] if masks else [True] * len(ids)


def assistant_turns_mask(
    encode: Callable[[str], List[int]], render: Callable[..., str], messages: List[Dict[str, str]], text: str,
    ids: List[int],
) -> List[bool]:
    """Each assistant turn's tokens in the conversation's ``ids`` (of ``text``)."""
    mask = [False] * len(ids)
    for end, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        context = render(messages[:end], True)
        upto = text if end == len(messages) - 1 else render(messages[:end + 1], False, continue_final_message=False)
        if not text.startswith(context.rstrip()) or not text.startswith(upto):
            raise ConfigurationError(
                f"The chat template writes the turns before assistant turn {end + 1} differently once later turns "
                "follow, so that turn cannot be learnt in the conversation as written; set assistant_only_loss: "
                "false to learn every token, or use a template that keeps earlier turns as they were"
            )
        first = common_prefix(encode(context), ids)
        last = len(ids) if upto is text else turn_end(encode(upto), ids)
        mask[first:last] = [True] * (last - first)
    return mask


def turn_end(upto: List[int], ids: List[int]) -> int:
    """Where the tokens of a conversation up to a turn's end (``upto``) end in the whole
    conversation's ``ids``: a token that the tokenizer merged across the turn's end (``><`` of
    ``<|eot_id|><|start_header_id|>`` under SentencePiece) is the turn's, as transformers'
    assistant mask counts every token holding a character of the turn."""
    shared = common_prefix(upto, ids)
    return shared if shared == len(upto) else shared + 1


def generation_mask(tokenizer: Any, template: Union[bool, str], messages: List[Dict[str, str]], ids: List[int]) -> List[bool]:
    """The template's ``{% generation %}`` mask (transformers' ``return_assistant_tokens_mask``)."""
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        chat_template=template_name(template))
    if list(out["input_ids"]) != ids:
        raise ConfigurationError("The chat template's tokens differ once its assistant mask is asked for")
    mask = [bool(bit) for bit in out["assistant_masks"]]
    if not any(mask):
        raise ConfigurationError(
            "assistant_only_loss: a conversation has no tokens inside the template's {% generation %} markers"
        )
    return mask
