"""What tasks produce, one kind per request type, built from checked :class:`Row` fields:
:class:`MCInstance` (choices ranked by log-likelihood), :class:`GenerationInstance` (a prompt
answered by greedy generation), :class:`DocumentInstance` (a text scored whole, for perplexity)
and :class:`TargetInstance` (a target scored after a context, with a greedy flag)."""

from dataclasses import dataclass, replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from ..tango_fixes.one_line_errors import shown_in_one_line


@dataclass(frozen=True)
class MCInstance:
    """One multiple-choice question in rank-classification form: the model scores each
    (context, continuation) pair and the highest log-likelihood wins.

    Most tasks share one ``context`` between all ``continuations``; tasks such as Winogrande
    vary the context instead and give ``choice_contexts``, one per continuation. Every
    continuation starts with ``target_delimiter`` (lm-evaluation-harness's name): the answer
    text is what follows it, and ``acc_norm`` divides by the answer text's length alone.
    ``description`` goes before everything else, few-shot demonstrations included (MMLU's
    "The following are ... about {subject}."); ``group`` names the part of the task the
    instance belongs to (MMLU's subject), for per-group metrics and same-group demonstrations.
    """

    id: str
    context: str
    continuations: List[str]
    label: int
    choice_contexts: Optional[List[str]] = None
    target_delimiter: str = " "
    description: str = ""
    group: Optional[str] = None

    def __post_init__(self) -> None:
        for continuation in self.continuations:
            if not continuation.startswith(self.target_delimiter):
                raise ValueError(f"Continuation {continuation!r} does not start with {self.target_delimiter!r}")

    def prompts(self) -> List[str]:
        """The context of each choice, without the description."""
        return self.choice_contexts or [self.context] * len(self.continuations)

    def pairs(self) -> List[Tuple[str, str]]:
        return [(self.description + prompt, c) for prompt, c in zip(self.prompts(), self.continuations)]

    def answer_lengths(self) -> List[int]:
        """Characters of each choice's answer text (without the target delimiter)."""
        return [len(c) - len(self.target_delimiter) for c in self.continuations]

    def demonstration(self) -> str:
        """The instance solved: its gold choice's context and continuation, as a few-shot example."""
        return self.prompts()[self.label] + self.continuations[self.label]

    def with_prefix(self, prefix: str) -> "MCInstance":
        """The instance with ``prefix`` (few-shot demonstrations) before its context(s)."""
        choice_contexts = [prefix + c for c in self.choice_contexts] if self.choice_contexts else None
        return replace(self, context=prefix + self.context, choice_contexts=choice_contexts)

    def in_conversation(self, chat: Any, demonstrations: Sequence["MCInstance"]) -> "MCInstance":
        """The instance with its ``demonstrations`` as a conversation of ``chat`` (a
        :class:`.chat.ChatFormat`: it knows how each instance type becomes one)."""
        return chat.multiple_choice(self, demonstrations)


@dataclass(frozen=True)
class GenerationInstance:
    """One prompt that the model answers by generating text, greedily, until one of the ``until``
    strings or EOS or ``max_new_tokens`` tokens. ``references`` are the accepted answers; the first
    is the one a fine-tuned model is trained to produce (followed by the tokenizer's EOS).
    ``prompt`` is complete: description and few-shot demonstrations included; as a few-shot
    demonstration the instance is its prompt, ``target_delimiter`` and first reference.

    Chat data (:mod:`.conversations`) says how fine-tuning learns it, as TRL's ``SFTTrainer``
    does (:mod:`catwalk_steps.training.chat_rows`): a conversation keeps its ``messages`` (the
    whole conversation, its last turn the first reference; under a chat template (:mod:`.chat`)
    with its system instruction and demonstrations, and ``prompt`` the rendered conversation
    before that last turn), and ``prompt_turns`` how many of them are the prompt (a
    prompt/completion row's; ``None`` for a ``messages`` row, whose assistant turns are all
    learnt). ``completion_row``: a prompt/completion row of plain strings, encoded whole as TRL
    encodes it (its completion is the reference)."""

    id: str
    prompt: str
    references: List[str]
    until: Tuple[str, ...] = ()
    max_new_tokens: int = 256
    group: Optional[str] = None
    target_delimiter: str = " "
    messages: Optional[Tuple[Tuple[str, str], ...]] = None
    prompt_turns: Optional[int] = None
    completion_row: bool = False

    def __post_init__(self) -> None:
        if not self.references:
            raise ValueError(f"Instance {self.id} has no reference answer")
        if self.max_new_tokens < 1:
            raise ValueError(f"Instance {self.id}: max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if any(stop == "" for stop in self.until):
            raise ValueError(f"Instance {self.id}: an empty stop string would stop generation at once")

    def demonstration(self) -> str:
        return self.prompt + self.target_delimiter + self.references[0]

    def with_prefix(self, prefix: str) -> "GenerationInstance":
        return replace(self, prompt=prefix + self.prompt)

    def in_conversation(self, chat: Any, demonstrations: Sequence["GenerationInstance"]) -> "GenerationInstance":
        """The instance with its ``demonstrations`` as a conversation of ``chat`` (a :class:`.chat.ChatFormat`)."""
        return chat.generation(self, demonstrations)


@dataclass(frozen=True)
class DocumentInstance:
    """One document scored whole by rolling log-likelihood. ``text`` is what the model reads;
    ``num_words`` and ``num_bytes`` are counted on the original document (before any
    detokenisation), as lm-evaluation-harness counts them for word and byte perplexity."""

    id: str
    text: str
    num_words: int
    num_bytes: int
    group: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError(f"Document {self.id} is empty")


@shown_in_one_line
class DataError(ValueError):
    """A data row that cannot become an instance. The message names the source, row and field."""


class Source(str):
    """Where rows come from, as messages name it (a file's path, a hub dataset), with the file
    line of each row where known: blank lines are skipped and a CSV field may hold line breaks,
    so a row's number is not its line."""

    lines: Optional[Sequence[int]] = None

    def __new__(cls, name: str, lines: Optional[Sequence[int]] = None) -> "Source":
        source = super().__new__(cls, name)
        source.lines = lines
        return source


def position(source: str, number: int) -> str:
    """Row ``number`` (1-based) of ``source`` as a message names it: its file line if known."""
    lines = getattr(source, "lines", None)
    return f"line {lines[number - 1]}" if lines else f"row {number}"


class Row:
    """One data row, whose fields come out checked: an error names the source, line (or row) and field."""

    def __init__(self, data: Mapping[str, Any], source: str, number: int) -> None:
        self.data, self.source, self.number = data, source, number

    def error(self, name: str, problem: str) -> DataError:
        return DataError(f"{self.source}: {position(self.source, self.number)}: field '{name}' {problem}")

    def get(self, name: str, kind: type = str) -> Any:
        """Field ``name``, required, non-empty and of type ``kind``."""
        value = self.data.get(name)
        if value is None:
            raise self.error(name, f"is missing: every row needs a {kind.__name__} here")
        if value == "":
            raise self.error(name, "is empty: give it a text")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(name, f"must be a {kind.__name__} (got {value!r})")
        return value

    def text(self, name: str) -> str:
        """An optional text field: empty when absent."""
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise self.error(name, f"must be a str (got {value!r})")
        return value or ""

    def index_of(self, name: str, options: Sequence[Any]) -> int:
        """The position of field ``name``'s value among ``options``."""
        value = self.data.get(name)
        if value not in options:
            raise self.error(name, f"must be one of {list(options)}, got {value!r}")
        return list(options).index(value)


@dataclass(frozen=True)
class TargetInstance:
    """One target scored after its context, with whether greedy decoding from the context would
    have produced it (lm-evaluation-harness's ``loglikelihood`` request, LAMBADA's last word).
    ``context`` is complete (few-shot demonstrations included); ``target`` carries its own
    leading space."""

    id: str
    context: str
    target: str
    group: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError(f"Instance {self.id} has an empty target")
