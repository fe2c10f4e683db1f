"""The ``olmes`` task: one of OLMES v0.1's core task variants by its alias, its requests as
oe-eval makes them, doc for doc."""

import json
import random
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from tango.common.exceptions import ConfigurationError

from ..chat import ChatFormat
from ..fewshot import SEPARATOR
from ..instance import MCInstance, Row
from ..task import MultipleChoiceTask
from .configs import OVERRIDES, UNCONDITIONED_CONTEXT, OlmesConfig, config_of
from .formats import FORMATS, TaskFormat

if TYPE_CHECKING:
    import datasets

#: OLMES's curated few-shot examples, rows of each task's dataset (their source inside).
SHOTS_FILE = Path(__file__).with_name("shots.json")


def curated_shots(key: str) -> List[Dict[str, Any]]:
    return json.loads(SHOTS_FILE.read_text(encoding="utf-8"))["shots"][key]


def sampled(count: int, limit: Optional[int], seed: int) -> List[int]:
    """Which docs OLMES evaluates, in its order: every one, or, where ``limit`` is below
    ``count``, a sample of ``limit`` drawn with ``seed``."""
    if limit is None or limit >= count:
        return list(range(count))
    return random.Random(seed).sample(range(count), limit)


@MultipleChoiceTask.register("olmes")
class OlmesTask(MultipleChoiceTask):
    """One of OLMES v0.1's core tasks (ARC-Challenge, ARC-Easy, BoolQ, CommonsenseQA,
    HellaSwag, OpenBookQA, PIQA, Social IQa, WinoGrande) in its cloze (``:rc::olmes``) or
    lettered (``:mc::olmes``) variant, as OLMES (oe-eval) makes its requests: the same docs in
    the same order, the same curated shots, contexts and continuations, and, for the cloze
    variants that have them, the unconditioned ``Answer:`` requests (``unconditioned: true`` in
    ``catwalk::predict`` scores them). Instances' ids are the docs' native ids (their position
    in the split where the dataset has none); records carry the variant's ``primary_metric``.

    ``name``: the alias. The overrides are OLMES's own settings, with its meaning: ``num_shots``
    (the first that many curated shots), ``limit`` (the sample's size; at least the split's
    size keeps every doc, in order), ``split``, ``random_subsample_seed``, ``fewshot_seed``
    (OLMES's curated shots are fixed: it changes no prompt). Data: the hub dataset OLMES's
    config names, or ``data_files`` ({split: path}) in that dataset's fields.
    """

    VERSION = "1"
    FEWSHOT_SPLIT = None  # curated shots, from no split of the data

    def __init__(
        self,
        name: str,
        data_files: Optional[Dict[str, str]] = None,
        revision: Optional[str] = None,
        num_shots: Optional[int] = None,
        limit: Optional[int] = None,
        split: Optional[str] = None,
        random_subsample_seed: Optional[int] = None,
        fewshot_seed: Optional[int] = None,
        **others: Any,
    ) -> None:
        base = config_of(name)
        if others:
            raise ConfigurationError(
                f"olmes {name}: {', '.join(map(repr, others))}: not an override OLMES has (its overrides: "
                f"{', '.join(OVERRIDES)}; and data_files, revision)")
        self.format: TaskFormat = FORMATS[base.task]
        overrides = {"num_shots": num_shots, "limit": limit, "split": split,
                     "random_subsample_seed": random_subsample_seed, "fewshot_seed": fewshot_seed}
        self.config: OlmesConfig = replace(base, **{k: v for k, v in overrides.items() if v is not None})
        self.check_config(data_files)
        self.HUB_CONFIG = self.format.dataset[1]  # per instance: one class serves every dataset
        self.HUB_SPLITS = {s: s for s in self.format.splits}
        super().__init__(data_files, hub_id=self.format.dataset[0], revision=revision, num_shots=self.config.num_shots,
                         fewshot_seed=self.config.fewshot_seed,
                         formulation="cloze" if self.config.formulation == "rc" else "mc")

    def check_config(self, data_files: Optional[Dict[str, str]]) -> None:
        """Refuses, at graph build, overrides that OLMES's data or shots cannot meet."""
        config, have = self.config, len(curated_shots(self.format.shots))
        if not 0 <= config.num_shots <= have:
            raise ConfigurationError(f"olmes {config.alias}: num_shots must be 0 to {have} (OLMES's curated shots), "
                                     f"got {config.num_shots}")
        if config.limit is not None and config.limit < 1:
            raise ConfigurationError(f"olmes {config.alias}: limit must be at least 1, got {config.limit}")
        splits = list(data_files) if data_files else self.format.splits
        if config.split not in splits:
            where = "data_files" if data_files else "/".join(filter(None, self.format.dataset))
            raise ConfigurationError(f"olmes {config.alias}: no split {config.split!r} in {where} "
                                     f"(have: {', '.join(splits)})")

    @property
    def splits(self) -> Sequence[str]:
        """The variant's one split: ``catwalk::predict``'s ``split`` must name it."""
        return [self.config.split]

    @property
    def primary_metric(self) -> str:
        return self.config.primary_metric

    @property
    def unconditioned_context(self) -> Optional[str]:
        return UNCONDITIONED_CONTEXT if self.config.unconditioned else None

    def check_prompts(self, split: str, chat: bool) -> None:
        if chat:
            raise ConfigurationError(f"olmes {self.config.alias}: OLMES v0.1's prompts are plain text: leave "
                                     "apply_chat_template unset, or, for a chat fine-tune (whose template is then "
                                     "used), set it to false with allow_other_template: true")

    def det_hash_object(self) -> Any:
        return (type(self).__name__, self.VERSION, sorted(asdict(self.config).items()), self.data_source())

    def instances(self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None) -> List[MCInstance]:
        """OLMES's docs of ``split`` in its order (the first ``limit`` of them if given), each
        after the curated shots."""
        rows, source = self.load_rows(split)
        numbers = sampled(len(rows), self.config.limit, self.config.random_subsample_seed)[:limit]
        prefix = "".join(shot.demonstration() + SEPARATOR for shot in self.shots())
        return [self.instance(rows, source, split, n).with_prefix(prefix) for n in numbers]

    def instance(self, rows: "datasets.Dataset", source: str, split: str, number: int) -> MCInstance:
        row = Row(rows[number], source, number + 1)
        return self.formulated(row, self.format.native_id(row, number))

    def formulated(self, row: Row, instance_id: str) -> MCInstance:
        return (self.format.rc if self.config.formulation == "rc" else self.format.mc)(row, instance_id)

    def shots(self) -> List[MCInstance]:
        source = f"OLMES's curated shots for {self.format.shots}"
        rows = curated_shots(self.format.shots)[: self.config.num_shots]
        return [self.formulated(Row(row, source, n + 1), f"shot/{n}") for n, row in enumerate(rows)]
