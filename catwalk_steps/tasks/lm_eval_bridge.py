"""``{type: "lm_eval", task: "<name>"}``: any lm-evaluation-harness multiple-choice task as our
instances, built by lm-evaluation-harness's own code, so its hundreds of maintained prompts need
no copy here.

Each document becomes an :class:`MCInstance` whose context is lm-evaluation-harness's
``fewshot_context`` (description, ``num_shots`` demonstrations drawn by its sampler from its
few-shot split, the document's ``doc_to_text``) and whose continuations are its
``target_delimiter`` + each ``doc_to_choice``; the gold index is what its ``process_results``
takes for gold. Tasks whose ``doc_to_text`` picks one of several contexts (Winogrande) become
instances with ``choice_contexts``. The pairs scored are exactly lm-evaluation-harness's
requests for the same documents, seed and shot count (tested).

Two of lm-evaluation-harness's rules carry over on purpose: demonstrations are drawn by one
generator, seeded with ``fewshot_seed``, in document order (a document's demonstrations depend
on the documents before it, not on ``limit``), and a document is excluded from its own
demonstrations only when the few-shot split is the test split.

Needs the ``lm_eval`` extra (``pip install -e ".[lm_eval]"``).
"""

import difflib
import functools
import importlib.metadata
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tango.common.exceptions import ConfigurationError

from ..storage.hashing import sha256_of_file
from .instance import DataError, MCInstance
from .task import MultipleChoiceTask

#: Our split names and the lm-evaluation-harness config keys that name them.
SPLIT_KEYS = {"train": "training_split", "validation": "validation_split", "test": "test_split"}


@functools.lru_cache(maxsize=None)
def task_manager(include_path: Optional[str], include_defaults: bool):
    """lm-evaluation-harness's task index; scanning its ~13,000 built-in YAMLs takes seconds,
    so one is kept per process."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise ConfigurationError(
            f'The lm_eval task type needs lm-evaluation-harness: pip install -e ".[lm_eval]" ({e})'
        )
    return TaskManager(include_path=include_path, include_defaults=include_defaults)


@functools.lru_cache(maxsize=None)
def built_task(name: str, include_path: Optional[str], include_defaults: bool):
    """The lm-evaluation-harness task object, its documents loaded (once per process)."""
    return task_manager(include_path, include_defaults).load(name)["tasks"][name]


@MultipleChoiceTask.register("lm_eval")
class LmEvalTask(MultipleChoiceTask):
    """An lm-evaluation-harness ``multiple_choice`` task by name.

    ``include_path`` is a directory of task YAMLs of one's own (lm-evaluation-harness's
    ``--include_path``), e.g. one that points a task at local files::

        task: piqa_local
        include: piqa.yaml   # or an absolute path to any task YAML
        dataset_path: json
        dataset_kwargs: {data_files: {train: train.jsonl, validation: dev.jsonl}}

    ``include_defaults: false`` skips lm-evaluation-harness's built-in tasks (faster to index,
    for tasks wholly defined under ``include_path``). Splits are ``train``, ``validation`` and
    ``test``, the task's ``training_split``, ``validation_split`` and ``test_split``.

    The cache key holds the task name, the lm-evaluation-harness version (which fixes its
    built-in tasks), the sha256 of every file under ``include_path``, the task's data source
    (hub id, config and revision, or the sha256 of local ``data_files``) and the few-shot
    settings.
    """

    VERSION = "1"

    def __init__(
        self,
        task: str,
        include_path: Optional[str] = None,
        include_defaults: bool = True,
        num_shots: int = 0,
        fewshot_split: Optional[str] = None,
        fewshot_seed: int = 1234,
    ) -> None:
        if num_shots < 0:
            raise ConfigurationError(f"num_shots must be at least 0, got {num_shots}")
        if fewshot_split is not None:
            raise ConfigurationError(
                f"lm_eval task {task!r}: demonstrations come from the task's own fewshot_split; "
                "to change it, write a task YAML that includes this one and sets fewshot_split"
            )
        if include_path is not None and not Path(include_path).is_dir():
            raise ConfigurationError(f"lm_eval task {task!r}: include_path is not a directory: {include_path}")
        self.name = task
        self.include_path = str(Path(include_path).resolve()) if include_path else None
        self.include_defaults = include_defaults
        self.num_shots, self.fewshot_seed = num_shots, fewshot_seed
        self.config = self._config()

    def _config(self) -> Dict[str, Any]:
        """The task's YAML config (includes merged, functions unresolved), checked to be a
        single multiple-choice task."""
        from lm_eval.tasks._index import Kind
        from lm_eval.tasks._yaml_loader import load_yaml

        index = task_manager(self.include_path, self.include_defaults).task_index
        entry = index.get(self.name)
        if entry is None:
            near = difflib.get_close_matches(self.name, list(index), n=5)
            raise ConfigurationError(
                f"lm-evaluation-harness has no task {self.name!r}" + (f" (close: {', '.join(near)})" if near else "")
            )
        if entry.kind is not Kind.TASK or entry.yaml_path is None:
            raise ConfigurationError(
                f"lm-evaluation-harness's {self.name!r} is a {entry.kind.name.lower()}, not a YAML task: "
                "name one of its tasks (e.g. our mmlu task covers the mmlu group)"
            )
        config = load_yaml(entry.yaml_path, resolve_func=False)
        if config.get("output_type") != "multiple_choice":
            raise ConfigurationError(
                f"lm-evaluation-harness's {self.name!r} is a {config.get('output_type')!r} task, not multiple_choice"
            )
        return config

    @property
    def splits(self) -> Sequence[str]:
        return [split for split, key in SPLIT_KEYS.items() if self.config.get(key)]

    def det_hash_object(self) -> Any:
        include = None
        if self.include_path:
            files = sorted(
                p for p in Path(self.include_path).rglob("*") if p.is_file() and "__pycache__" not in p.parts
            )
            include = {str(p.relative_to(self.include_path)): sha256_of_file(p) for p in files}
        source = (self.config.get("dataset_path"), self.config.get("dataset_name"),
                  _with_file_hashes(self.config.get("dataset_kwargs")))
        return (type(self).__name__, self.VERSION, importlib.metadata.version("lm_eval"), self.name, include, source,
                (self.num_shots, self.fewshot_seed))

    def instances(self, split: str, limit: Optional[int] = None) -> List[MCInstance]:
        task = built_task(self.name, self.include_path, self.include_defaults)
        if split not in self.splits:
            raise ConfigurationError(
                f"lm_eval task {self.name!r} has no {split} split (have: {', '.join(self.splits)})"
            )
        docs = {"train": task.training_docs, "validation": task.validation_docs, "test": task.test_docs}[split]()
        if self.num_shots and not hasattr(task, "sampler"):
            raise ConfigurationError(f"lm_eval task {self.name!r} has no documents to draw demonstrations from")
        task.set_fewshot_seed(self.fewshot_seed)  # lm-evaluation-harness's sampler, reseeded as its evaluator does
        count = len(docs) if limit is None else min(limit, len(docs))
        return [self._instance(task, docs[n], f"{split}/{n}", n + 1) for n in range(count)]

    def _instance(self, task, doc: Dict[str, Any], instance_id: str, row: int) -> MCInstance:
        context = task.fewshot_context(doc, self.num_shots)
        choices = task.doc_to_choice(doc)
        delimiter = task.config.target_delimiter
        gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
        if isinstance(gold, str):
            gold = choices.index(gold) if gold in choices else -1
        if not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise DataError(
                f"lm_eval task {self.name!r}: document {row}: gold {gold!r} is not one of {len(choices)} choices"
            )
        if task.multiple_input:  # one context per choice, one shared continuation
            continuation = delimiter + str(task.doc_to_target(doc))
            return MCInstance(id=instance_id, context=context[gold], continuations=[continuation] * len(context),
                              label=gold, choice_contexts=list(context), target_delimiter=delimiter)
        return MCInstance(id=instance_id, context=context, continuations=[delimiter + c for c in choices], label=gold,
                          target_delimiter=delimiter)


def _with_file_hashes(dataset_kwargs: Optional[Dict[str, Any]]) -> Any:
    """``dataset_kwargs`` with each local data file replaced by the sha256 of its contents."""
    if not dataset_kwargs:
        return dataset_kwargs

    def content(value: Any) -> Any:
        if isinstance(value, str) and Path(value).is_file():
            return sha256_of_file(Path(value))
        if isinstance(value, (list, tuple)):
            return [content(v) for v in value]
        if isinstance(value, dict):
            return {k: content(v) for k, v in sorted(value.items())}
        return value

    return {key: content(value) if key == "data_files" else value for key, value in sorted(dataset_kwargs.items())}
