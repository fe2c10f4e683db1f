"""Generation (``generate_until``): a greedy generation per instance from its prompt
(:func:`..models.prompt_room.generation_requests`), one record per instance with the text and
the task's scores, and from those each score's mean (:mod:`..reports.generation`) and, per
instance, every numeric score.

Fine-tuning (:class:`GenerationObjective`) learns each instance's answer: token-level
cross-entropy on its first reference answer followed by EOS, given the prompt
(:mod:`..models.answer_loss`), or on a chat row's learnt tokens, **normalised by the answer
tokens of the whole global batch**: every worker knows the step's global batch from the shared
batch plan, so each divides its micro-batches' summed losses by the same count. With DDP's
average over workers the step's gradient is then the global batch's mean over answer tokens, for
any micro-batching and device count (a per-micro-batch or per-worker mean would weigh a token by
how many others share its micro-batch).

Validation measures ``val_loss``, the answer-token cross-entropy of the whole validation split
(summed over it, divided by its answer tokens), and, when it chooses the best weights, a metric
the tasks report (``val_metric: exact_match``, ``f1``, ``exact_match/strict-match``, ...): greedy
generations (:mod:`..models.generation`) scored by each task's own rule, recorded as
``val_<metric>``, larger being better. ``exact_match`` names each task's exact match, whatever
its filter (GSM8K's and lm-eval tasks' ``exact_match/strict-match``). By default the lowest
``val_loss`` chooses.
"""

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError

from ..models.generation import GenerationRequest, generate_greedy
from ..models.loading import context_window
from ..models.prompt_room import generation_requests
from ..reports.generation import score_averages
from ..tasks.generative import GenerativeTask
from ..tasks.instance import GenerationInstance
from .base import Record, RequestKind, RequestSetting, register, with_group
from .objective import GENERATED, Example, TrainingObjective

if TYPE_CHECKING:
    from ..models.answer_rows import AnswerRow

logger = logging.getLogger(__name__)


def generation_records(
    task: GenerativeTask,
    instances: Sequence[GenerationInstance],
    requests: Sequence[GenerationRequest],
    generations: Sequence[Dict[str, Any]],
    max_length: int,
) -> List[Dict[str, Any]]:
    """Per instance: its id, the prompt's token count and whether it was cut from the left to fit
    (``truncated``), the generated text, the references, the task's scores and the ``margin``
    (the smallest top-two logit gap over the greedy decisions, :mod:`..models.generation`)."""
    texts = [g["text"] for g in generations]
    records = []
    for instance, request, generation, scores in zip(instances, requests, generations, task.scores(instances, texts)):
        record = {
            "id": instance.id,
            "num_prompt_tokens": len(request.prompt),
            "truncated": len(request.window(max_length)) < len(request.prompt),
            "generation": generation["text"],
            "references": list(instance.references),
            "scores": scores,
            "margin": generation["margin"],
        }
        records.append(with_group(record, instance))
    return records


def numeric_scores(records: Sequence[Mapping[str, Any]]) -> List[str]:
    """The names of the numeric scores every record holds (``exact_match``, ``f1``,
    ``exact_match/strict-match``, ...), in the task's order."""
    names = records[0]["scores"] if records else ()
    return [name for name in names
            if all(name in r["scores"] and isinstance(r["scores"][name], (int, float)) for r in records)]


#: The names of the task scores that are 0/1 (before a filter's name).
BINARY_SCORES = ("exact_match", "acc")


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


def answer_examples(conventions, instances_per_task: List[List[GenerationInstance]], max_length: int, desc: str,
                    chat_example) -> List["AnswerRow"]:
    """One row per instance (:class:`..models.answer_rows.AnswerRow`), cut to the model's window.

    Chat data (a conversation, or TRL's prompt/completion row for a causal LM) is one sequence per
    row, its learnt tokens masked, cut keeping its start (``chat_example``: the step's chat
    settings, bound). Any other row is its prompt and its first reference after the target
    delimiter, then EOS (for an encoder-decoder, as :mod:`..models.seq2seq` reads it), its prompt
    cut from the left: an answer that leaves no room for a prompt is an error before any model
    loads. A chat row with nothing learnt left in the window is left out, with a warning (as TRL
    drops it)."""
    from ..models.answer_loss import reference_row

    examples, cut = [], 0
    for task, instances in enumerate(instances_per_task):
        for instance in Tqdm.tqdm(instances, desc=desc):
            if conventions.encoder_decoder and instance.messages is not None:
                raise ConfigurationError(
                    f"Instance {instance.id} is a conversation, which fine-tunes causal LMs only (an encoder-decoder "
                    "learns a prompt's answer: give prompt/completion or prompt/answers rows)"
                )
            if instance.messages is not None or (instance.completion_row and not conventions.encoder_decoder):
                row = chat_example(instance, task)
                cut += row is None
            else:
                row = reference_row(conventions, instance.prompt, instance.target_delimiter + instance.references[0],
                                    max_length, instance, task)
            if row is not None:
                examples.append(row)
    if cut:
        logger.warning("%s: %d rows have nothing to learn within the model's window of %d tokens (their start is "
                       "kept, as TRL keeps it): they are left out", desc, cut, max_length)
    return examples


class GenerationObjective(TrainingObjective):
    """The answer's loss (see the module); validation by that loss or by a metric of the tasks'
    on greedy generations."""

    tasks_called = "generative"
    val_metrics = ("loss", "exact_match")
    learns_sequences = True

    def generates(self, val_metric: Optional[str]) -> bool:
        return val_metric not in (None, "loss")

    def check_val_metric(self, val_metric: str, tasks: Sequence[Any]) -> None:
        """``loss``, or a metric that each task reports."""
        self.task_metrics(val_metric, tasks)

    def task_metrics(self, val_metric: Optional[str], tasks: Sequence[Any]) -> Optional[List[str]]:
        return [task_metric(task, val_metric) for task in tasks] if self.generates(val_metric) else None

    def examples(self, conventions, instances_per_task, max_length, desc, chat_example) -> List[Example]:
        return answer_examples(conventions, instances_per_task, max_length, desc, chat_example)

    def example_tokens(self, example: Example) -> int:
        return example.length

    def model(self, spec, adapter, gradient_checkpointing, shared_context, lm=None):
        from ..models.answer_loss import AnswerLossModel  # (peft: only once training)

        return AnswerLossModel(spec, adapter, gradient_checkpointing, lm=lm)

    def collator(self, model, pad_token_id: int, max_length: int):
        from ..models.answer_loss import AnswerCollator

        return AnswerCollator(pad_token_id, max_length, model.scoring_lm.config.is_encoder_decoder)

    def loss_divisor(self, step_examples, micro_batches_per_worker: int, world_size: int) -> float:
        """The answer tokens of the step's global batch over ``world_size`` (the losses are sums)."""
        return sum(example.learnt for example in step_examples) / world_size

    def validation_sums(self, outputs: Dict[str, torch.Tensor], selected: str) -> Dict[str, torch.Tensor]:
        """The summed loss and the answer tokens it is summed over (the generated score is added
        by :meth:`generated_score`)."""
        return {"loss": outputs["losses"].sum(), "tokens": outputs["tokens"].sum()}

    def generated_score(self, lm, conventions, tasks, task_metrics, examples, max_length, batch_size) -> float:
        instances = [example.instance for example in examples]
        requests = generation_requests(conventions, instances, max_length)
        generations = generate_greedy(
            lm, conventions, requests, pad_token_id=conventions.pad_token_id, max_length=max_length,
            max_batch_size=batch_size,
        )
        total = 0.0
        for example, instance, generation in zip(examples, instances, generations):
            (scores,) = tasks[example.task].scores([instance], [generation["text"]])
            total += scores[task_metrics[example.task]]
        return total

    def validation_scores(self, sums: Mapping[str, float], selected: str, instances: int) -> Dict[str, float]:
        """``val_loss`` per answer token, and the generated score per instance where it chooses."""
        return {"val_loss": sums["loss"] / sums["tokens"],
                **({selected: sums[GENERATED] / instances} if GENERATED in sums else {})}


class Generation(RequestKind):
    name = "generate_until"
    journal = "generations"
    description = "Generations"
    record_field = "generation"
    conversational = True
    training = GenerationObjective()

    def requests(self, instances: Sequence[GenerationInstance],
                 setting: RequestSetting) -> Tuple[List[GenerationRequest], List[int]]:
        max_length = context_window(setting.config)
        return generation_requests(setting.conventions, instances, max_length), list(range(len(instances)))

    def work(self, requests: Sequence[GenerationRequest]) -> Any:
        return [[list(r.prompt), r.until, r.max_new_tokens] for r in requests]

    def compute(self, lm, spec, requests: Sequence[GenerationRequest], max_batch_tokens: int, **batching: Any) -> None:
        generate_greedy(lm, spec.conventions(), requests, max_batch_tokens=max_batch_tokens, **batching)

    def records(self, instances, requests, instance_of, results, setting) -> List[Record]:
        return generation_records(setting.task, instances, requests, results, context_window(setting.config))

    def metrics(self, records: List[Record]) -> Dict[str, Any]:
        return score_averages(records)

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
        """Every numeric score all records hold (:func:`numeric_scores`)."""
        return {name: np.array([r["scores"][name] for r in records], dtype=np.float64)
                for name in numeric_scores(records)}

    def binary(self, metric: str) -> bool:
        """A task's scores are named by the task (and, for lm_eval tasks, their filter after a
        ``/``: ``exact_match/strict-match``): ``exact_match`` and ``acc`` are 0/1; any other
        score (``f1``, a task's own) is taken as continuous, which the paired permutation test
        takes whatever its values."""
        return metric.split("/")[0] in BINARY_SCORES

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> Optional[str]:
        """``exact_match``, else the task's first 0/1 score in the task's order
        (``exact_match/strict-match`` before ``exact_match/flexible-extract``, as lm-evaluation-harness
        lists GSM8K's filters), else none."""
        binary = [name for name in numeric_scores(records) if self.binary(name)]
        return "exact_match" if "exact_match" in binary else next(iter(binary), None)

    def instance_text(self, instance: GenerationInstance) -> Record:
        return {"prompt": instance.prompt, "gold": (list(instance.references) or [None])[0]}


register(Generation())
