"""The multiple-choice task abstraction: every task turns its rows into :class:`MCInstance` objects."""

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from tango.common.exceptions import ConfigurationError

from .base import Task
from .chat import ChatFormat
from .fewshot import check_shots, fewshot_key, prompted_instances
from .formulation import lettered, without_answer_cue
from .instance import MCInstance, Row

if TYPE_CHECKING:  # datasets is imported where rows are loaded: a cached run never needs it
    import datasets


class MultipleChoiceTask(Task):
    """A multiple-choice task read from the HF hub or from local files (:class:`~.base.Task`).

    Subclasses say which hub dataset holds the task and how one row becomes an
    :class:`MCInstance`.

    Every task also takes:

    - ``num_shots``, ``fewshot_split``, ``fewshot_seed``: that many solved instances of
      ``fewshot_split`` (by default ``FEWSHOT_SPLIT``) go before each instance's context
      (:mod:`.fewshot`);
    - ``formulation``: ``"cloze"`` scores each answer text, ``"mc"`` lists the lettered choices
      in the prompt and scores the letters (:mod:`.formulation`), for tasks that allow both.

    The cache key of a task (``det_hash_object``) is its class, its prompt ``VERSION``, its
    settings and *what the data is*: the hub id and revision, or the sha256 of each local
    file. Moving a file does not retrain a model; editing one does. Few-shot settings and a
    formulation other than the task's default join the key only when set, so a zero-shot task
    keeps the key it had before they existed.
    """

    VERSION = "1"
    REQUEST_TYPE = "multiple_choice"
    #: The field whose value gives the gold index, named when it is out of range.
    LABEL_FIELD = "label"
    #: A context that carries no question, e.g. "Answer:", for tasks whose prompt ends in it.
    #: Scoring each continuation after it too gives ``acc_uncond``: choices ranked by how much
    #: the question raises their log-likelihood (lm-evaluation-harness's ``acc_mutual_info``).
    UNCONDITIONED_CONTEXT: Optional[str] = None
    #: The split that few-shot demonstrations come from unless ``fewshot_split`` says otherwise;
    #: None where the task's own definition decides (lm_eval), so no split of ours is checked.
    FEWSHOT_SPLIT: Optional[str] = "train"
    #: ``"random"``: a seeded sample per instance; ``"first"``: the first rows, as MMLU's 5-shot.
    FEWSHOT_SAMPLER = "random"
    #: A row field that groups rows (MMLU: ``subject``): demonstrations come from the instance's
    #: own group, and metrics are also reported per group.
    GROUP_FIELD: Optional[str] = None
    FORMULATIONS: Sequence[str] = ("cloze", "mc")
    DEFAULT_FORMULATION = "cloze"

    def __init__(
        self,
        data_files: Optional[Dict[str, str]] = None,
        hub_id: Optional[str] = None,
        revision: Optional[str] = None,
        num_shots: int = 0,
        fewshot_split: Optional[str] = None,
        fewshot_seed: int = 1234,
        formulation: Optional[str] = None,
    ) -> None:
        super().__init__(data_files, hub_id, revision)
        self.formulation = formulation or self.DEFAULT_FORMULATION
        if self.formulation not in self.FORMULATIONS:
            raise ConfigurationError(
                f"{type(self).__name__}: formulation must be one of {', '.join(self.FORMULATIONS)}, "
                f"got {self.formulation!r}"
            )
        self.num_shots = num_shots
        self.fewshot_split = fewshot_split or self.FEWSHOT_SPLIT
        self.fewshot_seed = fewshot_seed
        check_shots(self)

    @property
    def unconditioned_context(self) -> Optional[str]:
        """``UNCONDITIONED_CONTEXT`` in the cloze formulation (a letter's prior is no baseline)."""
        if self.UNCONDITIONED_CONTEXT is None or self.formulation != "cloze":
            return None
        return self.UNCONDITIONED_CONTEXT

    def settings(self) -> Any:
        """What else, besides the data, decides the instances (for the cache key)."""
        return None

    def det_hash_object(self) -> Any:
        key: Tuple[Any, ...] = (type(self).__name__, self.VERSION, self.settings(), self.data_source())
        prompting: Dict[str, Any] = {}
        if self.formulation != self.DEFAULT_FORMULATION:
            prompting["formulation"] = self.formulation
        if self.num_shots:
            prompting["fewshot"] = fewshot_key(self)
        return key + (prompting,) if prompting else key

    def instances(self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None) -> List[MCInstance]:
        """The instances of ``split`` in file order, the first ``limit`` of them if given; with
        ``chat``, their prompts as conversations (:mod:`.chat`)."""
        return prompted_instances(self, split, limit, chat)

    def row_numbers(self, rows: "datasets.Dataset", source: str) -> List[int]:
        """Which rows of a split make instances: all of them, unless a task selects some."""
        return list(range(len(rows)))

    def instance(self, rows: "datasets.Dataset", source: str, split: str, number: int) -> MCInstance:
        """Row ``number`` (0-based) of ``split`` as a zero-shot instance in this task's formulation."""
        row = Row(rows[number], source, number + 1)
        instance = self.row_to_instance(row, f"{split}/{number}")
        if not 0 <= instance.label < len(instance.continuations):
            raise row.error(
                self.LABEL_FIELD, f"must be in [0, {len(instance.continuations) - 1}], got {instance.label}"
            )
        if self.formulation == "mc":
            instance = lettered(instance, self.mc_question(row, instance))
        group = row.get(self.GROUP_FIELD) if self.GROUP_FIELD else None
        return replace(instance, description=self.description(row), group=group)

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        """Build the cloze instance from a row; ``row.get(name, kind)`` returns a checked field."""
        raise NotImplementedError

    def mc_question(self, row: Row, cloze: MCInstance) -> str:
        """The question above the lettered choices in the ``mc`` formulation: by default the
        cloze context without its closing ``Answer:``."""
        return without_answer_cue(cloze.context)

    def description(self, row: Row) -> str:
        """Text before the whole prompt, demonstrations included; none by default."""
        return ""
