"""Fine-tuning on generative tasks: only the loss and what validation measures differ from
multiple choice; the batch plan, seeds, checkpoints, strategies and the result are shared.

The loss is token-level cross-entropy on each instance's first reference answer followed by
EOS, given the prompt (:mod:`..models.answer_loss`), **normalised by the answer tokens of the
whole global batch**: every worker knows the step's global batch from the shared
:class:`~.batches.BatchPlan`, so each divides its micro-batches' summed losses by the same
count. With DDP's average over workers the step's gradient is then the global batch's mean over
answer tokens, for any micro-batching and device count (a per-micro-batch or per-worker mean
would weigh a token by how many others share its micro-batch).

Validation measures ``val_loss``, the answer-token cross-entropy of the whole validation split
(summed over it, divided by its answer tokens), and, when it chooses the best weights, a metric
the tasks report (``val_metric: exact_match``, ``f1``, ``exact_match/strict-match``, ...): greedy
generations (:mod:`..models.generation`) scored by each task's own rule, recorded as
``val_<metric>``, larger being better. ``exact_match`` names each task's exact match, whatever
its filter (GSM8K's and lm-eval tasks' ``exact_match/strict-match``). By default the lowest
``val_loss`` chooses.
"""

import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from tango import Step
from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError

from ..kinds import Generation, MultipleChoice
from .batches import BatchPlan
from .chat_rows import sequence_example

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ..models.conventions import TokenConventions
    from ..tasks import GenerationInstance

logger = logging.getLogger(__name__)

MULTIPLE_CHOICE, GENERATIVE = MultipleChoice.name, Generation.name
#: The validation numbers that may choose the best weights, per kind of task; the first is the default.
VAL_METRICS = {MULTIPLE_CHOICE: ("accuracy", "loss", "acc_norm", "acc_per_token"), GENERATIVE: ("loss", "exact_match")}
#: Their names in validation records (and ``training_metrics``).
RECORD_KEYS = {"accuracy": "val_acc", "loss": "val_loss", "exact_match": "val_exact_match"}
#: The model's outputs (:class:`..models.rank_classification.RankClassificationModel`) that say
#: which instances a multiple-choice accuracy other than ``acc`` gets right, by record key.
CHOICE_PICKS = {"val_acc_norm": "correct_norm", "val_acc_per_token": "correct_per_token"}
#: Other names of those numbers: a multiple-choice task reports its accuracy as ``acc``.
ALIASES = {MULTIPLE_CHOICE: {"acc": "accuracy"}, GENERATIVE: {}}

Example = Dict[str, Any]


def training_kind(tasks: Sequence[Any]) -> str:
    """The request type of all of ``tasks``: a step trains on multiple-choice tasks or on
    generative ones, never on both (their losses are not on one scale)."""
    kinds = {getattr(task, "REQUEST_TYPE", None): task for task in tasks}
    unknown = [kind for kind in kinds if kind not in VAL_METRICS]
    if unknown:
        names = ", ".join(f"{type(kinds[kind]).__name__} ({kind})" for kind in unknown)
        raise ConfigurationError(
            f"catwalk::finetune trains on multiple-choice or generative tasks; it cannot train on {names}"
        )
    if len(kinds) > 1:
        listed = "; ".join(f"{kind}: {type(task).__name__}" for kind, task in kinds.items())
        raise ConfigurationError(
            "catwalk::finetune's tasks must be all multiple-choice or all generative, not a mix "
            f"({listed}): their losses are not on one scale. Fine-tune in two steps, one per kind"
        )
    return next(iter(kinds), MULTIPLE_CHOICE)


def task_metric(task: Any, val_metric: str) -> str:
    """The name under which ``task`` reports ``val_metric`` (``exact_match`` is its exact match
    under whatever filter), or a :class:`ConfigurationError` listing what it reports."""
    names = list(getattr(task, "METRICS", ()))
    if val_metric in names:
        return val_metric
    found = next((name for name in names if val_metric == "exact_match" and name.split("/")[0] == val_metric), None)
    if found is None:
        raise ConfigurationError(
            f"val_metric {val_metric!r}: {type(task).__name__} reports none such; choose loss or one of its "
            f"metrics: {', '.join(names)}"
        )
    return found


def generated_metric(kind: str, val_metric: Optional[str]) -> bool:
    """Whether ``val_metric`` is measured on greedy generations (a generative task's metric)."""
    return kind == GENERATIVE and val_metric not in (None, "loss")


def check_val_metric(kwargs: Dict[str, Any]) -> None:
    """Checks ``val_metric`` against the tasks' kind, the metrics they report and the strategy,
    when the step graph is built; one naming its kind's default becomes ``None``, so that it keeps
    the default's key."""
    # A task that another step makes is known when this step runs: run() checks it then.
    tasks = [task for task in kwargs.get("tasks") or [] if not isinstance(task, Step)]
    kind = training_kind(tasks)
    val_metric = ALIASES[kind].get(kwargs.get("val_metric"), kwargs.get("val_metric"))
    if val_metric is None or not tasks:
        return
    if generated_metric(kind, val_metric):
        for task in tasks:
            task_metric(task, val_metric)
    elif val_metric not in VAL_METRICS[kind]:
        names = [name + "".join(f" ({alias})" for alias, of in ALIASES[kind].items() if of == name)
                 for name in VAL_METRICS[kind]]
        raise ConfigurationError(
            f"val_metric must be one of {', '.join(names)} for {kind} tasks, got {val_metric!r}: validation ranks "
            "choices by summed log-likelihood, per character and per token, and measures the loss"
        )
    if kwargs.get("validation_split", "validation") is None:
        raise ConfigurationError("val_metric needs a validation_split to measure")
    workers = kwargs.get("device_count", 1) * kwargs.get("nodes", 1)
    if generated_metric(kind, val_metric) and kwargs.get("strategy", "ddp") == "fsdp" and workers > 1:
        raise ConfigurationError(
            f"val_metric: {val_metric} generates on each worker's share of the validation split, which a model "
            "sharded with strategy fsdp cannot do (its workers must run forward passes in step): "
            "validate by loss (the default) under fsdp, or train with ddp"
        )
    if val_metric == VAL_METRICS[kind][0]:
        kwargs["val_metric"] = None


def selected_record_key(kind: str, val_metric: Optional[str]) -> str:
    """The validation record's number that chooses the best weights."""
    name = val_metric or VAL_METRICS[kind][0]
    return RECORD_KEYS.get(name) or f"val_{name}"


def answer_examples(
    conventions: "TokenConventions", instances_per_task: List[List["GenerationInstance"]], max_length: int,
    desc: str, chat_rows: Callable[["GenerationInstance"], Tuple[List[int], List[bool]]],
) -> List[Example]:
    """One example per instance: its prompt and answer tokens, how many tokens its loss sums
    over, the instance itself and its task's position (for validation by exact match).

    Chat data (a conversation, or TRL's prompt/completion row for a causal LM) is one sequence per
    row, its learnt tokens masked (``chat_rows``: :func:`.chat_rows.row_tokens` with the step's
    settings; the answer then carries a ``mask``). Any other row is its prompt and its first
    reference after the target delimiter, then EOS (for an encoder-decoder, as
    :mod:`..models.seq2seq` reads it). An answer longer than the model's window is an error before
    any model loads; a chat row cut to the window with nothing learnt left in it is left out, with
    a warning (as TRL drops it)."""
    from ..models.answer_loss import encode_answer, scored_tokens  # (peft: only once training)

    examples, cut = [], 0
    for task, instances in enumerate(instances_per_task):
        for instance in Tqdm.tqdm(instances, desc=desc):
            if conventions.encoder_decoder and instance.messages is not None:
                raise ConfigurationError(
                    f"Instance {instance.id} is a conversation, which fine-tunes causal LMs only (an encoder-decoder "
                    "learns a prompt's answer: give prompt/completion or prompt/answers rows)"
                )
            if instance.messages is not None or (instance.completion_row and not conventions.encoder_decoder):
                example = sequence_example(*chat_rows(instance), max_length, instance)
                cut += example is None
                if example is not None:
                    examples.append({**example, "task": task})
                continue
            query = encode_answer(conventions, instance.prompt, instance.target_delimiter + instance.references[0])
            tokens = scored_tokens(query.continuation, conventions.encoder_decoder)
            if tokens > max_length:
                raise ConfigurationError(
                    f"Instance {instance.id}: its answer and its end (EOS) make {tokens} tokens, more than the "
                    f"model's context window of {max_length}"
                )
            examples.append({"prompt": list(query.context), "answer": list(query.continuation), "tokens": tokens,
                             "instance": instance, "task": task})
    if cut:
        logger.warning("%s: %d rows have nothing to learn within the model's window of %d tokens (their start is "
                       "kept, as TRL keeps it): they are left out", desc, cut, max_length)
    return examples


def loss_divisor(train: List[Example], plan: BatchPlan, step: int, world_size: int) -> float:
    """What each worker divides its micro-batches' summed losses by: the answer tokens of step
    ``step``'s global batch over ``world_size`` (DDP's average over workers makes up the rest)."""
    return sum(train[i]["tokens"] for i in plan.step_examples(step)) / world_size


def generated_scores(
    lm: "PreTrainedModel", conventions: "TokenConventions", tasks: Sequence[Any], metrics: Sequence[str],
    examples: List[Example], max_length: int, batch_size: int,
) -> float:
    """The summed score of greedy generations for ``examples`` (one per instance: see
    :func:`answer_examples`), each scored by its task under its name in ``metrics``."""
    from ..models.generation import generate_greedy
    from ..models.prompt_room import generation_requests

    instances = [example["instance"] for example in examples]
    requests = generation_requests(conventions, instances, max_length)
    generations = generate_greedy(
        lm, conventions, requests, pad_token_id=conventions.pad_token_id, max_length=max_length,
        max_batch_size=batch_size,
    )
    total = 0.0
    for example, instance, generation in zip(examples, instances, generations):
        (scores,) = tasks[example["task"]].scores([instance], [generation["text"]])
        total += scores[metrics[example["task"]]]
    return total


def answer_validation_sums(outputs: Dict[str, torch.Tensor]) -> torch.Tensor:
    """A validation batch's (correct, summed loss, count) in the units of generative validation:
    the count is of answer tokens, and nothing is counted correct (exact match is measured apart)."""
    losses = outputs["losses"].double()
    return torch.stack([torch.zeros((), dtype=losses.dtype, device=losses.device), losses.sum(),
                        outputs["tokens"].double().sum()])
