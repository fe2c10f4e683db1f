"""Few-shot prompts: solved instances of another split placed before each instance's context.

The demonstrations of an instance depend only on the seed and the instance's id (its split and
row), never on which other instances are scored, in what order, how many (``limit``) or on how
many devices: the sample is drawn by a generator seeded with ``"{seed}/{instance id}"``.
lm-evaluation-harness instead draws every document's demonstrations from one generator in
document order, so a document's prompt there depends on the documents before it.
"""

import random
from dataclasses import replace
from typing import Any, Dict, List, Optional, Protocol, Tuple

from tango.common.exceptions import ConfigurationError

from .instance import MCInstance

#: What joins demonstrations to each other and to the evaluated context (lm-evaluation-harness's
#: default ``fewshot_delimiter``).
SEPARATOR = "\n\n"


def choose(pool: List[int], k: int, exclude: Optional[int], sampler: str, seed: str) -> List[int]:
    """``k`` rows of ``pool`` other than ``exclude``: the first ones, or a seeded sample."""
    drawn = pool[: k + 1] if sampler == "first" else random.Random(seed).sample(pool, min(k + 1, len(pool)))
    return [number for number in drawn if number != exclude][:k]


class DemonstrationSource(Protocol):
    """What :func:`add_demonstrations` reads of a task (a :class:`~.task.MultipleChoiceTask`)."""

    GROUP_FIELD: Optional[str]
    FEWSHOT_SAMPLER: str
    num_shots: int
    fewshot_split: str
    fewshot_seed: Any

    def load_rows(self, split: str) -> Tuple[Any, str]: ...

    def row_numbers(self, rows: Any, source: str) -> List[int]: ...

    def instance(self, rows: Any, source: str, split: str, number: int) -> MCInstance: ...


def add_demonstrations(
    task: DemonstrationSource, split: str, numbers: List[int], instances: List[MCInstance]
) -> List[MCInstance]:
    """``instances`` (of rows ``numbers`` of ``split``) with ``task.num_shots`` demonstrations
    from ``task.fewshot_split`` before each context (and each choice context), joined by
    :data:`SEPARATOR`. An instance of the few-shot split never demonstrates itself; with
    ``GROUP_FIELD``, demonstrations come from the instance's own group."""
    rows, source = task.load_rows(task.fewshot_split)
    candidates = task.row_numbers(rows, source)  # checks the rows first
    groups = list(rows[task.GROUP_FIELD]) if task.GROUP_FIELD else None
    pools: Dict[Optional[str], List[int]] = {}
    for number in candidates:
        pools.setdefault(groups[number] if groups else None, []).append(number)
    demonstrations: Dict[int, str] = {}
    result = []
    for own_row, instance in zip(numbers, instances):
        exclude = own_row if split == task.fewshot_split else None
        seed = f"{task.fewshot_seed}/{instance.id}"
        chosen = choose(pools.get(instance.group, []), task.num_shots, exclude, task.FEWSHOT_SAMPLER, seed)
        if len(chosen) < task.num_shots:
            where = f" in group {instance.group!r}" if instance.group is not None else ""
            raise ConfigurationError(
                f"{type(task).__name__}: {task.num_shots} demonstrations asked for, but split "
                f"'{task.fewshot_split}' has only {len(chosen)} to offer{where} (from {source})"
            )
        for number in chosen:
            if number not in demonstrations:
                demonstrations[number] = task.instance(rows, source, task.fewshot_split, number).demonstration()
        prefix = "".join(demonstrations[number] + SEPARATOR for number in chosen)
        result.append(
            replace(
                instance,
                context=prefix + instance.context,
                choice_contexts=[prefix + c for c in instance.choice_contexts] if instance.choice_contexts else None,
            )
        )
    return result
