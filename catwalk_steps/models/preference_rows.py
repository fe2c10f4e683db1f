"""The training row of preference tuning: a prompt's tokens and the chosen and the rejected
answer's, built by :func:`preference_row` and nowhere else, token for token as TRL 1.16's
``DPOTrainer`` makes them:

- plain text: the prompt, ``prompt + chosen`` and ``prompt + rejected`` each encoded with the
  tokenizer's special tokens (TRL's ``processing_class(text=...)``), each answer followed by the
  tokenizer's EOS where it does not end with it;
- a conversation: the chat template's texts encoded without special tokens (TRL's
  ``apply_chat_template(tokenize=True)``): a template that writes no BOS gets none;
- the answers start where the prompt's encoding and either whole sequence's part (TRL's
  ``common_prefix_length``, the smaller of the two), so a token the tokenizer merges across the
  prompt's end is the answer's;
- each sequence (prompt and answer) is cut to the model's window keeping its start, as TRL's
  collator cuts it at ``max_length``; a pair whose prompt fills the window is left out, as TRL
  drops it.
"""

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from tango.common.exceptions import ConfigurationError

from .conventions import common_prefix
from .scoring import Query

if TYPE_CHECKING:
    from .conventions import TokenConventions


@dataclass(frozen=True)
class PreferenceRow:
    """A pair's ``prompt`` tokens and its ``chosen`` and ``rejected`` answer tokens (each after
    the prompt, the whole sequence within the window), and the reference model's summed
    log-probabilities of the two answers (``reference``, once computed: DPO's implicit reward is
    measured from them)."""

    prompt: Tuple[int, ...]
    chosen: Tuple[int, ...]
    rejected: Tuple[int, ...]
    reference: Optional[Tuple[float, float]] = None

    @property
    def length(self) -> int:
        """The tokens the pair feeds the model: both sequences."""
        return 2 * len(self.prompt) + len(self.chosen) + len(self.rejected)

    def with_reference(self, chosen: float, rejected: float) -> "PreferenceRow":
        return replace(self, reference=(chosen, rejected))


def encoded_pair(conventions: "TokenConventions", instance: Any) -> Tuple[list, list, list]:
    """The token ids of ``instance``'s prompt and of the prompt followed by each answer, as TRL
    encodes them (``instance``: a :class:`catwalk_steps.tasks.preference.PreferenceInstance`)."""
    answers = instance.chosen, instance.rejected
    if instance.chat:
        encode = conventions.plain
    else:
        encode = conventions.encode
        eos = conventions.tokenizer.eos_token
        if eos is None:
            raise ConfigurationError(
                f"A preference pair's answers end with the tokenizer's EOS, so that the model learns where an answer "
                f"stops, and the tokenizer of {conventions.tokenizer.name_or_path} has none: give the model a "
                "tokenizer with an eos_token"
            )
        answers = tuple(text + ("" if text.endswith(eos) else eos) for text in answers)
    return encode(instance.prompt), encode(answers[0]), encode(answers[1])


def pair_queries(conventions: "TokenConventions", instance: Any) -> Tuple[Query, Query]:
    """The pair's (prompt, chosen answer) and (prompt, rejected answer) queries, whole: the
    answers start where the prompt's encoding and either sequence's part."""
    prompt, chosen, rejected = encoded_pair(conventions, instance)
    start = min(common_prefix(prompt, chosen), common_prefix(prompt, rejected))
    if start == 0:
        raise ConfigurationError(
            f"Instance {instance.id}: its prompt shares no leading token with its answers' encodings, so nothing "
            "would predict an answer's first token: give the tokenizer a BOS, or end the prompt on a word boundary"
        )
    context = tuple(prompt[:start])
    return Query(context, tuple(chosen[start:])), Query(context, tuple(rejected[start:]))


def preference_row(conventions: "TokenConventions", instance: Any,
                   max_length: int) -> Optional[PreferenceRow]:
    """``instance`` as a training row, each sequence cut to the window of ``max_length`` tokens
    keeping its start; ``None`` where its prompt leaves no room for an answer's token."""
    chosen, rejected = pair_queries(conventions, instance)
    room = max_length - len(chosen.context)
    if room <= 0:
        return None
    return PreferenceRow(chosen.context, chosen.continuation[:room], rejected.continuation[:room])


def with_measured_references(rows: List[PreferenceRow], values: Sequence[Sequence[float]], split: str) -> List[PreferenceRow]:
    """``rows`` with the reference log-probabilities ``values`` measured for them (one pair each,
    in order) by ``catwalk::reference_log_probs``."""
    if len(values) != len(rows):
        raise ConfigurationError(f"The precomputed reference log-probabilities of the {split} split are of "
                                 f"{len(values)} pairs, and it has {len(rows)}")
    return [row.with_reference(*value) for row, value in zip(rows, values)]
