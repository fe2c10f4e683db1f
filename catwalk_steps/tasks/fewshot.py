"""Few-shot prompts: solved instances of another split placed before each instance's context.

The demonstrations of an instance depend only on the seed and the instance's id (its split and
row), never on which other instances are scored, in what order, how many (``limit``) or on how
many devices: the sample is drawn by a generator seeded with ``"{seed}/{instance id}"``.
lm-evaluation-harness instead draws every document's demonstrations from one generator in
document order, so a document's prompt there depends on the documents before it.
"""

import random
from typing import Any, Dict, List, Optional, Protocol, Tuple, TypeVar, Union

from tango.common.exceptions import ConfigurationError

from .chat import ChatFormat
from .instance import GenerationInstance, MCInstance

#: An instance that takes demonstrations: multiple choice or generative.
Demonstrable = TypeVar("Demonstrable", MCInstance, GenerationInstance)

#: What joins demonstrations to each other and to the evaluated context (lm-evaluation-harness's
#: default ``fewshot_delimiter``).
SEPARATOR = "\n\n"


def choose(pool: List[int], k: int, exclude: Optional[int], sampler: str, seed: str) -> List[int]:
    """``k`` rows of ``pool`` other than ``exclude``: the first ones, or a seeded sample."""
    drawn = pool[: k + 1] if sampler == "first" else random.Random(seed).sample(pool, min(k + 1, len(pool)))
    return [number for number in drawn if number != exclude][:k]


class DemonstrationSource(Protocol):
    """What :func:`add_demonstrations` reads of a task (multiple choice or generative)."""

    GROUP_FIELD: Optional[str]
    FEWSHOT_SAMPLER: str
    num_shots: int
    fewshot_split: str
    fewshot_seed: Any

    def load_rows(self, split: str) -> Tuple[Any, str]: ...

    def row_numbers(self, rows: Any, source: str) -> List[int]: ...

    def instance(self, rows: Any, source: str, split: str, number: int) -> Union[MCInstance, GenerationInstance]: ...


def check_shots(task: Any) -> None:
    """Raises at graph build if ``task``'s few-shot settings cannot be met: a negative count, or
    a few-shot split the task does not have."""
    if task.num_shots < 0:
        raise ConfigurationError(f"num_shots must be at least 0, got {task.num_shots}")
    if task.num_shots and task.fewshot_split is not None and task.fewshot_split not in task.splits:
        raise ConfigurationError(
            f"{type(task).__name__}: no split '{task.fewshot_split}' to take {task.num_shots} few-shot "
            f"demonstrations from (have: {', '.join(task.splits)}); set fewshot_split"
        )


def fewshot_key(task: DemonstrationSource) -> Tuple[Any, ...]:
    """What decides a task's demonstrations, for its cache key."""
    return task.num_shots, task.fewshot_split, task.fewshot_seed, task.FEWSHOT_SAMPLER, SEPARATOR


def prompted_instances(
    task: DemonstrationSource, split: str, limit: Optional[int], chat: Optional[ChatFormat] = None
) -> List[Any]:
    """The instances of ``task``'s ``split`` in file order (the first ``limit`` of them if given),
    with the task's demonstrations before each, in plain text joined by :data:`SEPARATOR` or, with
    ``chat``, as a conversation (:mod:`.chat`): what a multiple-choice and a generative task both
    make of their rows."""
    rows, source = task.load_rows(split)
    numbers = task.row_numbers(rows, source)
    if limit is not None:
        numbers = numbers[:limit]
    instances = [task.instance(rows, source, split, n) for n in numbers]
    if not task.num_shots and chat is None:
        return instances
    chosen = demonstrations(task, split, numbers, instances) if task.num_shots else [[] for _ in instances]
    if chat is None:
        return [i.with_prefix("".join(d.demonstration() + SEPARATOR for d in ds)) for i, ds in zip(instances, chosen)]
    return [i.in_conversation(chat, ds) for i, ds in zip(instances, chosen)]


def demonstrations(
    task: DemonstrationSource, split: str, numbers: List[int], instances: List[Demonstrable]
) -> List[List[Demonstrable]]:
    """The ``task.num_shots`` demonstrations from ``task.fewshot_split`` of each of ``instances``
    (of rows ``numbers`` of ``split``). An instance of the few-shot split never demonstrates
    itself; with ``GROUP_FIELD``, demonstrations come from the instance's own group."""
    rows, source = task.load_rows(task.fewshot_split)
    candidates = task.row_numbers(rows, source)  # checks the rows first
    groups = list(rows[task.GROUP_FIELD]) if task.GROUP_FIELD else None
    pools: Dict[Optional[str], List[int]] = {}
    for number in candidates:
        pools.setdefault(groups[number] if groups else None, []).append(number)
    solved: Dict[int, Demonstrable] = {}
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
            if number not in solved:
                solved[number] = task.instance(rows, source, task.fewshot_split, number)
        result.append([solved[number] for number in chosen])
    return result
