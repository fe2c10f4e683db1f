"""``{type: "lm_eval", task: "<name>"}``: any lm-evaluation-harness multiple-choice,
``generate_until``, ``loglikelihood_rolling`` or ``loglikelihood`` task as our instances, built
by lm-evaluation-harness's own code, so its hundreds of maintained prompts need no copy here.

Each document becomes an :class:`MCInstance` whose context is lm-evaluation-harness's
``fewshot_context`` (description, ``num_shots`` demonstrations drawn by its sampler from its
few-shot split, the document's ``doc_to_text``) and whose continuations are its
``target_delimiter`` + each ``doc_to_choice``; the gold index is what its ``process_results``
takes for gold. Tasks whose ``doc_to_text`` picks one of several contexts (Winogrande) become
instances with ``choice_contexts``. The pairs scored are exactly lm-evaluation-harness's
requests for the same documents, seed and shot count (tested).

A ``generate_until`` document becomes a :class:`GenerationInstance` of the same few-shot
context, its ``generation_kwargs``' stop strings and ``max_gen_toks``; its generation is scored
by lm-evaluation-harness's own filters and ``process_results`` (:func:`harness_scores`).
A ``loglikelihood_rolling`` document (WikiText) becomes a :class:`DocumentInstance` of its
``doc_to_target``, weighed by the words and bytes its ``process_results`` counts
(:func:`document_instance`); a ``loglikelihood`` one (LAMBADA) a :class:`TargetInstance` of its
few-shot context and ``doc_to_target``. Their metrics keep lm-evaluation-harness's names
(``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``; ``perplexity``, ``acc``).

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
from .chat import ChatFormat
from .generative import check_generation_settings
from .instance import DataError, DocumentInstance, GenerationInstance, MCInstance, TargetInstance
from .task import MultipleChoiceTask

#: Our split names and the lm-evaluation-harness config keys that name them.
SPLIT_KEYS = {"train": "training_split", "validation": "validation_split", "test": "test_split"}
#: The ``output_type``s this bridge runs: the request type of the task's instances.
OUTPUT_TYPES = ("multiple_choice", "generate_until", "loglikelihood_rolling", "loglikelihood")
#: HFLM's default ``max_gen_toks``, for tasks whose generation_kwargs do not set one.
DEFAULT_MAX_GEN_TOKS = 256


@functools.lru_cache(maxsize=None)
def task_manager(include_path: Optional[str], include_defaults: bool):
    """lm-evaluation-harness's task index; scanning its ~13,000 built-in YAMLs takes seconds,
    so one is kept per process. It is only read: each task builds its own task object from it."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise ConfigurationError(
            f'The lm_eval task type needs lm-evaluation-harness: pip install -e ".[lm_eval]" ({e})'
        )
    return TaskManager(include_path=include_path, include_defaults=include_defaults)


def task_index(name: str, include_path: Optional[str], include_defaults: bool):
    """The :func:`task_manager` that holds task ``name``: for a task YAML of ``include_path``'s
    own, the index of ``include_path`` alone even when ``include_defaults`` is set, which finds
    the same entry (``include_path``'s tasks override the built-in ones, and a YAML's
    ``include:`` and ``!function`` are resolved by file path, not by the index) without
    scanning the ~13,000 built-in YAMLs (seconds); else the index ``include_defaults`` asks for."""
    if include_path is not None and include_defaults:
        local = task_manager(include_path, False)
        if name in local.all_subtasks and name not in local.all_groups and name not in local.all_tags:
            return local
    return task_manager(include_path, include_defaults)


def task_config(manager: Any, name: str) -> Dict[str, Any]:
    """The YAML config of lm-evaluation-harness's task ``name`` as its index holds it (includes
    merged, functions unresolved), checked to be one YAML task of a request type we run
    (:data:`OUTPUT_TYPES`) before any data is read."""
    if name not in manager.all_tasks:  # every name: tasks, groups and tags
        near = difflib.get_close_matches(name, manager.all_tasks, n=5)
        raise ConfigurationError(
            f"lm-evaluation-harness has no task {name!r}" + (f" (close: {', '.join(near)})" if near else "")
        )
    if name in manager.all_groups or name in manager.all_tags:
        kind = "group" if name in manager.all_groups else "tag"
        raise ConfigurationError(
            f"lm-evaluation-harness's {name!r} is a {kind}, not a task: "
            "name one of its tasks (e.g. our mmlu task covers the mmlu group)"
        )
    config = manager.task_index[name].cfg
    if "class" in config:  # its splits, data source and prompt are Python code, not config
        raise ConfigurationError(f"lm-evaluation-harness's {name!r} is defined by a Python class, not a task YAML")
    if config.get("output_type") not in OUTPUT_TYPES:
        raise ConfigurationError(f"lm-evaluation-harness's {name!r} is not a task of a type we run "
                                 f"({', '.join(OUTPUT_TYPES)}; output_type: {config.get('output_type', 'unset')})")
    if config["output_type"] == "generate_until":
        greedy_generation(name, config.get("generation_kwargs"), config.get("repeats", 1))
    return config


def greedy_generation(name: str, generation_kwargs: Optional[Dict[str, Any]], repeats: int) -> Dict[str, Any]:
    """``generation_kwargs`` as lm-evaluation-harness's HFLM reads them (``until``, ``max_gen_toks``),
    refused unless they ask for greedy decoding of one answer: sampling is not what we run."""
    from lm_eval.models.utils import normalize_gen_kwargs

    kwargs = normalize_gen_kwargs(dict(generation_kwargs or {}), DEFAULT_MAX_GEN_TOKS)
    other = set(kwargs) - {"until", "max_gen_toks", "do_sample", "temperature"}
    if kwargs.get("do_sample") or other or repeats != 1:
        raise ConfigurationError(
            f"lm-evaluation-harness's {name!r} asks for generation_kwargs {generation_kwargs} and repeats {repeats}: "
            "only greedy decoding of one answer is run (do_sample: false; until and max_gen_toks only, repeats: 1)"
        )
    until = [stop for stop in kwargs["until"] if stop]  # HFLM ignores empty stop strings
    check_generation_settings(f"lm-evaluation-harness's {name!r}", until, kwargs["max_gen_toks"])
    return {"until": tuple(until), "max_new_tokens": kwargs["max_gen_toks"]}


@MultipleChoiceTask.register("lm_eval")
class LmEvalTask(MultipleChoiceTask):
    """An lm-evaluation-harness ``multiple_choice`` or ``generate_until`` task by name; its
    ``REQUEST_TYPE`` is the task's ``output_type``.

    ``include_path`` is a directory of task YAMLs of one's own (lm-evaluation-harness's
    ``--include_path``), e.g. one that points a task at local files::

        task: piqa_local
        include: piqa.yaml   # or an absolute path to any task YAML
        dataset_path: json
        dataset_kwargs: {data_files: {train: train.jsonl, validation: dev.jsonl}}

    ``include_defaults: false`` skips lm-evaluation-harness's built-in tasks (faster to index,
    for tasks wholly defined under ``include_path``). Splits are ``train``, ``validation`` and
    ``test``, the task's ``training_split``, ``validation_split`` and ``test_split``.

    Of the settings every task takes, ``num_shots`` and ``fewshot_seed`` apply as they are, and
    ``num_shots`` left unset is the task YAML's ``num_fewshot`` (0 where it has none), as
    ``lm_eval --tasks NAME`` runs it (``gsm8k`` is 5-shot); the others are the task YAML's to
    say: its ``dataset_path``, ``dataset_name`` and ``dataset_kwargs`` are the data
    (``data_files``, ``hub_id``, ``revision``), its ``fewshot_split`` or ``fewshot_config`` where
    demonstrations come from (``fewshot_split``), and its prompt the formulation: its
    ``description``, ``target_delimiter``, ``fewshot_delimiter``, ``fewshot_config`` and
    ``gen_prefix`` apply as lm-evaluation-harness applies them (the prompt is its own
    ``fewshot_context``, given the ``gen_prefix`` its evaluator gives it).

    A ``generate_until`` task generates greedily until its ``generation_kwargs``' ``until``
    strings or ``max_gen_toks`` tokens (sampling settings are refused), and each generation is
    scored by the task's filters and ``process_results`` (``!function`` ones included); a
    score under a filter other than ``none`` is named ``<metric>/<filter>``
    (``exact_match/strict-match``, lm-evaluation-harness's ``exact_match,strict-match``).

    The cache key holds the task name, the lm-evaluation-harness version (which fixes its
    built-in tasks), the sha256 of every file under ``include_path``, the task's data source
    (hub id, config and revision, or the sha256 of local ``data_files``) and the few-shot
    settings.
    """

    VERSION = "1"
    #: No split of ours to check: lm-evaluation-harness falls back to the training, validation,
    #: then test documents, so a task with documents always has demonstrations.
    FEWSHOT_SPLIT = None
    FORMULATIONS = ("own",)  # the YAML's prompt, lettered choices or not
    DEFAULT_FORMULATION = "own"

    def __init__(
        self,
        task: str,
        include_path: Optional[str] = None,
        include_defaults: bool = True,
        num_shots: Optional[int] = None,
        fewshot_split: Optional[str] = None,
        fewshot_seed: int = 1234,
    ) -> None:
        if fewshot_split is not None:
            raise ConfigurationError(
                f"lm_eval task {task!r}: demonstrations come from the task's own fewshot_split; "
                "to change it, write a task YAML that includes this one and sets fewshot_split"
            )
        super().__init__(num_shots=num_shots or 0, fewshot_seed=fewshot_seed)  # first: its checks read no index
        if include_path is not None and not Path(include_path).is_dir():
            raise ConfigurationError(f"lm_eval task {task!r}: include_path is not a directory: {include_path}")
        self.name = task
        self.include_path = str(Path(include_path).resolve()) if include_path else None
        self.include_defaults = include_defaults
        self.config = task_config(task_index(task, self.include_path, include_defaults), task)
        self.REQUEST_TYPE = self.config["output_type"]
        if num_shots is None:  # the task's own, as lm-evaluation-harness's command line runs it
            self.num_shots = task_shots(task, self.config)

    @functools.cached_property
    def harness_task(self) -> Any:
        """This task's own lm-evaluation-harness task object, its documents loaded on first use.
        Not shared: :meth:`instances` reseeds its sampler."""
        return task_index(self.name, self.include_path, self.include_defaults).load(self.name)["tasks"][self.name]

    @property
    def METRICS(self) -> List[str]:  # noqa: N802 (the generative tasks' attribute of that name)
        """The per-instance scores a ``generate_until`` task's records hold (:func:`harness_scores`'
        names: ``<metric>`` under the ``none`` filter, ``<metric>/<filter>`` under others)."""
        if self.REQUEST_TYPE != "generate_until":
            return []
        filters = [f["name"] for f in self.config.get("filter_list") or []] or ["none"]
        metrics = [m["metric"] for m in self.config.get("metric_list") or [] if isinstance(m.get("metric"), str)]
        return [metric if f == "none" else f"{metric}/{f}" for f in filters for metric in metrics]

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

    def instances(self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None) -> List[Any]:
        """The documents of ``split`` (the first ``limit``) as lm-evaluation-harness's evaluator
        makes them into requests; with ``chat``, as under its ``--apply_chat_template``,
        ``--system_instruction`` and ``--fewshot_as_multiturn``."""
        docs = self._docs(split)
        task = self.harness_task
        task.set_fewshot_seed(self.fewshot_seed)  # as lm-evaluation-harness's evaluator, before each build
        count = len(docs) if limit is None else min(limit, len(docs))
        if self.REQUEST_TYPE == "generate_until":
            check_mean_aggregation(self.name, task)
            settings = greedy_generation(self.name, task.config.generation_kwargs, task.config.repeats or 1)
            return [
                generation_instance(task, docs[n], f"{split}/{n}", self.num_shots, settings, chat)
                for n in range(count)
            ]
        if self.REQUEST_TYPE == "loglikelihood_rolling":
            check_aggregations(self.name, task, ROLLING_AGGREGATIONS)
            return [document_instance(self.name, task, docs[n], f"{split}/{n}", n + 1) for n in range(count)]
        if self.REQUEST_TYPE == "loglikelihood":
            check_aggregations(self.name, task, TARGET_AGGREGATIONS)
            return [target_instance(self.name, task, docs[n], f"{split}/{n}", n + 1, self.num_shots, chat)
                    for n in range(count)]
        return [self._instance(task, docs[n], f"{split}/{n}", n + 1, chat) for n in range(count)]

    def _docs(self, split: str) -> Any:
        if split not in self.splits:
            raise ConfigurationError(
                f"lm_eval task {self.name!r} has no {split} split (have: {', '.join(self.splits)})"
            )
        task = self.harness_task
        return {"train": task.training_docs, "validation": task.validation_docs, "test": task.test_docs}[split]()

    def scores(self, instances: Sequence[GenerationInstance], generations: Sequence[str]) -> List[Dict[str, float]]:
        """Each generation scored as lm-evaluation-harness scores it (:func:`harness_scores`)."""
        places = [instance.id.rsplit("/", 1) for instance in instances]  # "<split>/<document number>"
        docs = {split: self._docs(split) for split in {split for split, _ in places}}
        return harness_scores(self.harness_task, [docs[split][int(n)] for split, n in places], generations)

    def _instance(self, task, doc: Dict[str, Any], instance_id: str, row: int, chat: Optional[ChatFormat]) -> MCInstance:
        context = prompt(task, doc, self.num_shots, chat)
        choices = task.doc_to_choice(doc)
        delimiter = task.config.target_delimiter
        if chat is not None:  # the answer follows the assistant's turn, or its gen_prefix
            gen_prefix = task.config.gen_prefix
            delimiter = delimiter if gen_prefix and not gen_prefix[-1].isspace() else ""
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


def task_shots(name: str, config: Dict[str, Any]) -> int:
    """The task YAML's ``num_fewshot`` (0 where it has none), checked."""
    shots = config.get("num_fewshot")
    if shots is None:
        return 0
    if not isinstance(shots, int) or isinstance(shots, bool) or shots < 0:
        raise ConfigurationError(f"lm_eval task {name!r}: its num_fewshot {shots!r} is not a count of shots")
    return shots


def prompt(task: Any, doc: Dict[str, Any], num_shots: int, chat: Optional[ChatFormat] = None) -> Any:
    """The document's context as lm-evaluation-harness's evaluator builds it (``build_all_requests``:
    ``fewshot_context`` with the document's ``gen_prefix``, and the chat settings)."""
    prefix = task.doc_to_prefix(doc)
    settings: Dict[str, Any] = {"gen_prefix": prefix} if prefix else {}
    if chat is not None:
        settings.update(system_instruction=chat.system_instruction, apply_chat_template=True,
                        fewshot_as_multiturn=chat.multiturn, chat_template=chat.render)
    return task.fewshot_context(doc, num_shots, **settings)


def generation_instance(
    task: Any, doc: Dict[str, Any], instance_id: str, num_shots: int, settings: Dict[str, Any],
    chat: Optional[ChatFormat] = None,
) -> GenerationInstance:
    """A ``generate_until`` document as lm-evaluation-harness's request for it: the few-shot
    context and the task's stop strings and budget; its targets as references (for the record
    and for fine-tuning; scores come from :func:`harness_scores`)."""
    target = task.doc_to_target(doc)
    if task.config.doc_to_choice is not None:
        target = task.doc_to_choice(doc)[target]
    references = [str(t) for t in target] if isinstance(target, list) else [str(target)]
    return GenerationInstance(
        id=instance_id, prompt=prompt(task, doc, num_shots, chat), references=references,
        target_delimiter=task.config.target_delimiter, **settings,
    )


def check_mean_aggregation(name: str, task: Any) -> None:
    """Our metrics are means of per-instance scores: a task that aggregates otherwise (corpus
    BLEU, F1 over all documents) would get other numbers than lm-evaluation-harness's."""
    from lm_eval.api.metrics import mean

    others = [metric for metric, aggregate in task.aggregation().items() if aggregate is not mean]
    if others:
        raise ConfigurationError(
            f"lm-evaluation-harness's {name!r} aggregates {', '.join(others)} otherwise than by the mean of "
            "per-document scores, which is what our metrics are"
        )


def harness_scores(task: Any, docs: Sequence[Dict[str, Any]], generations: Sequence[str]) -> List[Dict[str, float]]:
    """Each generation scored by the task's filter pipelines (its ``filter_list``, else
    ``take_first`` as ``none``), built by lm-evaluation-harness's ``build_filter_ensemble`` as
    its task does, and by its ``process_results``; named ``<metric>`` under the ``none`` filter
    and ``<metric>/<filter>`` under others."""
    from lm_eval.api.instance import Instance
    from lm_eval.filters import build_filter_ensemble

    pipelines = [
        build_filter_ensemble(
            f["name"], [[step["function"], {k: v for k, v in step.items() if k != "function"}] for step in f["filter"]]
        )
        for f in task.config.filter_list
    ] if task.config.filter_list is not None else [build_filter_ensemble("none", [["take_first", None]])]
    requests = [Instance(request_type="generate_until", doc=doc, arguments=(), idx=0) for doc in docs]
    for request, text in zip(requests, generations):
        request.resps = [text]
    scores: List[Dict[str, float]] = [{} for _ in docs]
    for pipeline in pipelines:
        pipeline.apply(requests)
        for score, request, doc in zip(scores, requests, docs):
            for metric, value in task.process_results(doc, [request.filtered_resps[pipeline.name]]).items():
                score[metric if pipeline.name == "none" else f"{metric}/{pipeline.name}"] = float(value)
    return scores


#: Each perplexity metric of a ``loglikelihood_rolling`` task, lm-evaluation-harness's aggregation
#: of it, and the document count it weighs log-likelihoods by (a :class:`DocumentInstance` field).
ROLLING_AGGREGATIONS = {
    "word_perplexity": ("weighted_perplexity", "num_words"),
    "byte_perplexity": ("weighted_perplexity", "num_bytes"),
    "bits_per_byte": ("bits_per_byte", "num_bytes"),
}
#: The metrics of a ``loglikelihood`` task (LAMBADA) and their aggregations.
TARGET_AGGREGATIONS = {"perplexity": ("perplexity", None), "acc": ("mean", None)}
#: A log-likelihood that :func:`document_instance` passes through the task's ``process_results``
#: to read the counts it weighs by.
_PROBE = -1.0


def check_aggregations(name: str, task: Any, expected: Dict[str, Any]) -> None:
    """Our perplexity metrics are lm-evaluation-harness's definitions (:mod:`..reports.perplexity`):
    a task that reports other metrics, or aggregates these otherwise, is refused."""
    from lm_eval.api import metrics

    wrong = [
        metric for metric, aggregate in task.aggregation().items()
        if metric not in expected or aggregate is not getattr(metrics, expected[metric][0])
    ]
    if wrong:
        raise ConfigurationError(
            f"lm-evaluation-harness's {name!r} reports {', '.join(wrong)} in a way we do not compute: a "
            f"{task.OUTPUT_TYPE} task here reports {', '.join(expected)} with lm-evaluation-harness's aggregations "
            f"({', '.join(f'{m}: {a}' for m, (a, _) in expected.items())})"
        )


def document_instance(name: str, task: Any, doc: Dict[str, Any], instance_id: str, row: int) -> DocumentInstance:
    """A ``loglikelihood_rolling`` document as lm-evaluation-harness's request for it: the text
    is its ``doc_to_target``; the words and bytes are those its own ``process_results`` weighs
    the log-likelihood by (WikiText counts them on the page before detokenising), else its
    ``count_words``/``count_bytes`` of the text."""
    text = task.doc_to_target(doc)
    if not isinstance(text, str) or not text:
        raise DataError(f"lm_eval task {name!r}: document {row}: the text to score is empty or not a string "
                        f"({text!r})")
    counts = {"num_words": task.count_words(text), "num_bytes": task.count_bytes(text)}
    for metric, item in task.process_results(doc, [_PROBE]).items():
        if not (isinstance(item, tuple) and len(item) == 2 and item[0] == _PROBE):
            raise ConfigurationError(f"lm-evaluation-harness's {name!r}: process_results gives {metric} as {item!r}, "
                                     "not (log-likelihood, count)")
        counts[ROLLING_AGGREGATIONS[metric][1]] = item[1]
    return DocumentInstance(id=instance_id, text=text, **counts)


def target_instance(name: str, task: Any, doc: Dict[str, Any], instance_id: str, row: int, num_shots: int,
                    chat: Optional[ChatFormat] = None) -> TargetInstance:
    """A ``loglikelihood`` document as lm-evaluation-harness's request for it: the few-shot
    context and the ``doc_to_target`` continuation."""
    target = task.doc_to_target(doc)
    if not isinstance(target, str) or not target:
        raise DataError(f"lm_eval task {name!r}: document {row}: the target is empty or not a string ({target!r})")
    return TargetInstance(id=instance_id, context=prompt(task, doc, num_shots, chat), target=target)


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
