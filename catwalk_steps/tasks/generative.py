"""Generative tasks: a prompt the model answers by greedy generation, scored against reference
answers (lm-evaluation-harness's ``generate_until`` request type).

A task turns each row into a :class:`GenerationInstance` (prompt, references, stop strings,
token budget) and scores a generation against its instance (:meth:`GenerativeTask.scores`, as
lm-evaluation-harness's ``process_results``): per-instance values that the metrics step
averages. ``{type: "generation"}`` reads any local JSONL of ``{"prompt": str, "answers": [str,
...]}`` lines, or of chat data as TRL takes it (:mod:`.conversations`).
"""

import json
import string
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tango.common.exceptions import ConfigurationError
from tango.common.params import Params

from ..tango_fixes.setting_types import list_expected
from .answer_match import squad_scores
from .base import Task
from .chat import ChatFormat
from .conversations import conversation_of
from .fewshot import check_shots, fewshot_key, prompted_instances
from .instance import GenerationInstance, Row

if TYPE_CHECKING:
    import datasets

#: ``generate``'s settings for sampling or beam search, which greedy generation has no use for.
SAMPLING = ("do_sample", "temperature", "top_p", "top_k", "num_beams", "typical_p", "repetition_penalty")

NO_PUNCTUATION = str.maketrans("", "", string.punctuation)  # what SQuAD's normalisation drops


def answer_texts(row: Row, name: str, value: Any) -> List[str]:
    """``value`` (field ``name`` of ``row``, or a part of it) as a non-empty list of texts, each
    of which SQuAD's scoring can tell from an empty answer. (One of articles alone, ``"The"``, it
    cannot either, but that is a word a dataset may mean; it is left as SQuAD's scoring treats it.)"""
    if not isinstance(value, list) or not value:
        raise row.error(name, f"must be a non-empty list of answer texts, got {value!r}")
    for answer in value:
        if not isinstance(answer, str):
            raise row.error(name, f"must hold only texts, got {answer!r}")
        if not answer.translate(NO_PUNCTUATION).strip():
            raise row.error(name, f"holds {answer!r}, which is empty once SQuAD's scoring drops punctuation: an empty "
                                  "or punctuation-only generation would match it; remove it")
    return value


def check_generation_settings(owner: str, until: Sequence[str], max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise ConfigurationError(f"{owner}: max_new_tokens must be at least 1, got {max_new_tokens}")
    if isinstance(until, str):
        raise list_expected(f"{owner}: until", until)
    if not isinstance(until, (list, tuple)) or not all(isinstance(stop, str) for stop in until):
        raise ConfigurationError(f"{owner}: until must be a list of stop strings, got {until!r}")
    if "" in until:
        raise ConfigurationError(f"{owner}: an empty stop string in until would stop every generation at once")


class GenerativeTask(Task):
    """A generative task read from the HF hub or local ``data_files`` (:class:`~.base.Task`).

    Subclasses say how a row becomes a prompt (:meth:`prompt`) and its accepted answers
    (:meth:`references`, the first one the answer demonstrations show and fine-tuning trains),
    and may change how a generation is scored (:meth:`scores`; by default SQuAD's exact match
    and F1, best over the references). Every generative task also takes:

    - ``until``: stop strings (the generation is cut at the first), replacing ``UNTIL``;
    - ``max_new_tokens``: the most tokens generated, replacing ``MAX_NEW_TOKENS``;
    - ``num_shots``, ``fewshot_split``, ``fewshot_seed``: solved instances (prompt, " ", first
      reference) before each prompt, drawn as for multiple-choice tasks (:mod:`.fewshot`).

    The cache key holds the class, ``VERSION``, the stop strings and budget, the data (hub id
    and revision, or each local file's sha256) and the few-shot settings.
    """

    REQUEST_TYPE = "generate_until"
    VERSION = "1"
    #: lm-evaluation-harness's default stop string for a generative task: its few-shot delimiter.
    UNTIL: Tuple[str, ...] = ("\n\n",)
    #: lm-evaluation-harness's default ``max_gen_toks``.
    MAX_NEW_TOKENS = 256
    DEFAULT_SHOTS = 0
    FEWSHOT_SPLIT: Optional[str] = "train"
    FEWSHOT_SAMPLER = "random"
    GROUP_FIELD: Optional[str] = None
    #: What :meth:`scores` gives for each instance: the metrics this task reports.
    METRICS: Sequence[str] = ("exact_match", "f1")

    def __init__(
        self,
        data_files: Optional[Dict[str, str]] = None,
        hub_id: Optional[str] = None,
        revision: Optional[str] = None,
        until: Optional[List[str]] = None,
        max_new_tokens: Optional[int] = None,
        num_shots: Optional[int] = None,
        fewshot_split: Optional[str] = None,
        fewshot_seed: int = 1234,
    ) -> None:
        super().__init__(data_files, hub_id, revision)
        if not self.data_files and self.hub_id is None:
            raise ConfigurationError(f"{type(self).__name__} has no hub copy: give data_files ({{split: path}})")
        until = self.UNTIL if until is None else until
        self.max_new_tokens = self.MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens
        check_generation_settings(type(self).__name__, until, self.max_new_tokens)
        self.until = tuple(until)  # checked first: a string would become its characters
        self.num_shots = self.DEFAULT_SHOTS if num_shots is None else num_shots
        self.fewshot_split = fewshot_split or self.FEWSHOT_SPLIT
        self.fewshot_seed = fewshot_seed
        check_shots(self)

    @classmethod
    def from_params(cls, params_: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Tango's construction, with a sampling setting refused as such (Tango would call it an
        "extra parameter", as if it were a typo)."""
        sampling = [name for name in SAMPLING if isinstance(params_, (dict, Params)) and name in params_]
        if sampling:
            raise ConfigurationError(
                f"{cls.__name__}: {', '.join(sampling)}: generation is greedy only (the most likely token at each "
                "step, lm-evaluation-harness's default); remove the sampling settings"
            )
        return super().from_params(params_, *args, **kwargs)

    def det_hash_object(self) -> Any:
        fewshot = fewshot_key(self) if self.num_shots else None
        return (type(self).__name__, self.VERSION, self.until, self.max_new_tokens, self.data_source(), fewshot)

    def instances(
        self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None
    ) -> List[GenerationInstance]:
        return prompted_instances(self, split, limit, chat)

    def row_numbers(self, rows: "datasets.Dataset", source: str) -> List[int]:
        return list(range(len(rows)))

    def instance(self, rows: "datasets.Dataset", source: str, split: str, number: int) -> GenerationInstance:
        """Row ``number`` (0-based) of ``split`` as a zero-shot instance."""
        row = Row(rows[number], source, number + 1)
        return GenerationInstance(
            id=f"{split}/{number}",
            prompt=self.prompt(row),
            references=self.references(row),
            until=self.until,
            max_new_tokens=self.max_new_tokens,
            group=row.get(self.GROUP_FIELD) if self.GROUP_FIELD else None,
        )

    def prompt(self, row: Row) -> str:
        raise NotImplementedError

    def references(self, row: Row) -> List[str]:
        raise NotImplementedError

    def scores(self, instances: Sequence[GenerationInstance], generations: Sequence[str]) -> List[Dict[str, float]]:
        """Each generation's scores against its instance, ``{metric: value}`` for every name in
        ``METRICS``: by default SQuAD's exact match and F1 (:mod:`.answer_match`)."""
        return [squad_scores(text, instance.references) for instance, text in zip(instances, generations)]


@Task.register("generation")
class GenerationTask(GenerativeTask):
    """Any local JSONL (or json/csv/parquet) of ``{"prompt": str, "answers": [str, ...]}`` rows,
    scored with SQuAD's exact match and F1. The prompt is used as it is.

    Chat data as TRL's ``SFTTrainer`` takes it works too (:mod:`.conversations`):
    ``{"prompt": str, "completion": str}`` rows (the completion follows the prompt directly, its
    own leading space included; it is the reference), and conversational rows
    (``{"messages": [{"role": ..., "content": ...}, ...]}``, or ``prompt`` and ``completion`` as
    lists of turns), whose last assistant turn is the reference. Conversations need a chat
    template (``apply_chat_template`` on ``catwalk::predict`` and ``catwalk::finetune``)."""

    def instance(self, rows: "datasets.Dataset", source: str, split: str, number: int) -> GenerationInstance:
        row = Row(rows[number], source, number + 1)
        conversational = conversation_of(row)
        if conversational is None and row.data.get("completion") is None:
            return super().instance(rows, source, split, number)
        settings = dict(id=f"{split}/{number}", until=self.until, max_new_tokens=self.max_new_tokens,
                        target_delimiter="")
        if conversational is None:  # TRL's prompt-completion row: the completion follows the prompt as it is
            references = answer_texts(row, "completion", [row.get("completion")])
            return GenerationInstance(prompt=row.get("prompt"), references=references, completion_row=True,
                                      **settings)
        # Until a chat template writes the conversation, its prompt is the question of its last exchange.
        conversation, prompt_turns = conversational
        (_, question), (_, answer) = conversation[-2:]
        name = "messages" if prompt_turns is None else "prompt/completion"
        return GenerationInstance(prompt=question, references=answer_texts(row, name, [answer]),
                                  messages=conversation, prompt_turns=prompt_turns, **settings)

    def instances(
        self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None
    ) -> List[GenerationInstance]:
        instances = super().instances(split, limit, chat)
        if chat is None and any(instance.messages for instance in instances):
            raise self.needs_a_template(split)
        return instances

    def check_prompts(self, split: str, chat: bool) -> None:
        """Conversations need a chat template and carry their own turns (no demonstrations)."""
        if not self.holds_conversations(split):
            return
        if not chat:
            raise self.needs_a_template(split)
        if self.num_shots:
            raise ConfigurationError(f"{type(self).__name__}: split {split!r} holds conversations, which carry their "
                                     f"own turns: num_shots must be 0, not {self.num_shots}")

    def holds_conversations(self, split: str) -> bool:
        """Read from the split's first row, where it is a local JSONL file."""
        path = self.data_files.get(split)
        if path is None or path.suffix != ".jsonl":
            return False
        with open(path, encoding="utf-8") as lines:
            first = next((line for line in lines if line.strip()), "")
        try:
            row = json.loads(first)
        except ValueError:
            return False  # a bad row is reported, naming its line, when the split is read
        return isinstance(row, dict) and (row.get("messages") is not None or isinstance(row.get("prompt"), list))

    def needs_a_template(self, split: str) -> ConfigurationError:
        return ConfigurationError(
            f"{type(self).__name__}: split {split!r} holds conversations (messages, or prompt and completion as "
            "lists of turns), which only a chat template turns into prompts: set apply_chat_template (in a config) "
            "or --apply_chat_template (on the command line)"
        )

    def prompt(self, row: Row) -> str:
        return row.get("prompt")

    def references(self, row: Row) -> List[str]:
        return answer_texts(row, "answers", row.data.get("answers"))


def field_of(row: Row, name: str, part: str) -> Any:
    """``row[name][part]`` from a nested hub field (SQuAD's ``answers.text``), checked to exist."""
    value: Mapping[str, Any] = row.data.get(name)  # type: ignore[assignment]
    if not isinstance(value, Mapping) or part not in value:
        raise row.error(name, f"must be an object with a '{part}' field, got {value!r}")
    return value[part]
