"""What fine-tuning on a request kind's tasks is: a :class:`TrainingObjective`, the ``training``
of the kind (:class:`.base.RequestKind`). ``catwalk::finetune`` asks it for the training
examples of the tasks' instances, the model whose forward pass gives their loss, the collator of
its batches, what a micro-batch's loss is divided by, and what validation measures and which of
its numbers may choose the best weights. The loop (:mod:`catwalk_steps.training.loop`) is the
same for every kind: a new trainable kind is its objective, in the kind's own module.

Every validation number is a sum over the validation split's instances, summed over the workers
before it is divided (:meth:`TrainingObjective.validation_sums`, then
:meth:`TrainingObjective.validation_scores`), so that it is exact whatever the device count. The
sums are named (``loss``, ``count``, ...): each kind says what it sums, and the loop sums them
by name.
"""

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from tango.common.exceptions import ConfigurationError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ..models.adapters import Adapter
    from ..models.conventions import TokenConventions
    from ..models.loading import ModelSpec
    from ..models.rank_classification import RankClassificationModel

#: A training row: each objective's own type (``ChoiceRow``, ``AnswerRow``, a ``Pack``); the loop
#: only hands them to the objective's collator.
Example = Any
#: A chat row (a conversation, or a prompt/completion row learnt as one sequence) and its task's
#: position as a training row, or ``None`` where the model's window leaves nothing of it to
#: learn: the step's chat settings, bound (:mod:`catwalk_steps.training.preparation`).
ChatExample = Callable[[Any, int], Optional[Example]]
#: The name of the generated score's sum (:meth:`TrainingObjective.generated_score`) among a
#: validation's sums.
GENERATED = "generated"


class TrainingObjective:
    """How a kind's tasks are fine-tuned and validated. Subclasses set the class attributes and
    implement the methods that raise :class:`NotImplementedError`."""

    #: What its tasks are called in messages ("multiple-choice": "for multiple-choice tasks").
    tasks_called: ClassVar[str]
    #: The validation numbers that may choose the best weights (``val_metric``); the first is the default.
    val_metrics: ClassVar[Tuple[str, ...]]
    #: Other names of those numbers (a multiple-choice task reports its accuracy as ``acc``).
    aliases: ClassVar[Mapping[str, str]] = {}
    #: Why only :attr:`val_metrics` may choose, for the refusal of any other.
    val_metrics_why: ClassVar[str] = ""
    #: Whether its examples are token sequences with a learnt mask, so that chat data's
    #: ``completion_only_loss``, ``assistant_only_loss`` and ``packing`` apply.
    learns_sequences: ClassVar[bool] = False
    #: The ``catwalk::finetune`` settings its loss takes (:meth:`configured`); any other kind's
    #: are refused for its tasks.
    settings: ClassVar[Tuple[str, ...]] = ()

    def configured(self, **settings: Any) -> "TrainingObjective":
        """The objective under the step's values of :attr:`settings`, checked."""
        return self

    def with_starting_model(self, model: "RankClassificationModel", examples: List[Example], collate: Callable,
                            batch_size: int, rank: int, world_size: int, device: torch.device) -> List[Example]:
        """``examples`` with what the loss measures on the model as it starts, before its first
        step and before a checkpoint is loaded (DPO's reference log-probabilities); as they are
        for a loss that needs nothing of it."""
        return examples

    def val_metric(self, name: Optional[str]) -> Optional[str]:
        """``name`` under its own name (an alias resolved)."""
        return self.aliases.get(name, name) if name is not None else None

    def generates(self, val_metric: Optional[str]) -> bool:
        """Whether validating ``val_metric`` generates answers greedily (which a model sharded
        with FSDP over several workers cannot do)."""
        return False

    def check_val_metric(self, val_metric: str, tasks: Sequence[Any]) -> None:
        """Refuses a ``val_metric`` (already under its own name) that validation cannot measure
        for ``tasks``."""
        if val_metric not in self.val_metrics:
            names = [name + "".join(f" ({alias})" for alias, of in self.aliases.items() if of == name)
                     for name in self.val_metrics]
            raise ConfigurationError(
                f"val_metric must be one of {', '.join(names)} for {self.tasks_called} tasks, got {val_metric!r}"
                + (f": {self.val_metrics_why}" if self.val_metrics_why else "")
            )

    def task_metrics(self, val_metric: Optional[str], tasks: Sequence[Any]) -> Optional[List[str]]:
        """The name of ``val_metric`` in each task's scores, where validation scores generations
        by the tasks' rules (:meth:`generates`); else ``None``."""
        return None

    def record_key(self, val_metric: Optional[str]) -> str:
        """The validation record's number that chooses the best weights (``val_acc``, ``val_loss``, ...)."""
        return f"val_{val_metric or self.val_metrics[0]}"

    def examples(self, conventions: "TokenConventions", instances_per_task: List[List[Any]], max_length: int,
                 desc: str, chat_example: ChatExample) -> List[Example]:
        """The training (or validation) examples of each task's instances, with a progress bar
        named ``desc``; an example the window cannot hold is an error before any model loads."""
        raise NotImplementedError

    def example_tokens(self, example: Example) -> int:
        """The tokens ``example`` feeds the model (the trackers' tokens/s)."""
        raise NotImplementedError

    def model(self, spec: "ModelSpec", adapter: Optional["Adapter"], gradient_checkpointing: bool,
              shared_context: bool, lm: Optional["PreTrainedModel"] = None) -> "RankClassificationModel":
        """The model to train, whose forward pass gives a batch's ``loss`` (``lm``: one whose
        weights are still on the meta device). Its ``scoring_lm`` is the language model."""
        raise NotImplementedError

    def collator(self, model: "RankClassificationModel", pad_token_id: int, max_length: int) -> Callable[[List[Example]], Dict[str, Any]]:
        """What turns a list of examples into the model's batch (sent to every worker)."""
        raise NotImplementedError

    def loss_divisor(self, step_examples: Sequence[Example], micro_batches_per_worker: int, world_size: int) -> float:
        """What each worker divides a micro-batch's loss by, so that with DDP's average over the
        workers the step's gradient is the mean over the global batch ``step_examples``, for any
        micro-batching and device count."""
        raise NotImplementedError

    def validation_sums(self, outputs: Dict[str, torch.Tensor], selected: str) -> Dict[str, torch.Tensor]:
        """A validation batch's sums by name (scalars) from the model's ``outputs``; ``selected``:
        the record key that chooses the best weights."""
        raise NotImplementedError

    def generated_score(self, lm: "PreTrainedModel", conventions: "TokenConventions", tasks: Sequence[Any],
                        task_metrics: Sequence[str], examples: List[Example], max_length: int, batch_size: int) -> float:
        """The summed score of greedy generations for ``examples``, each scored by its task's rule
        under its name in ``task_metrics`` (only where :meth:`generates`)."""
        raise NotImplementedError

    def validation_scores(self, sums: Mapping[str, float], selected: str, instances: int) -> Dict[str, float]:
        """The validation record's numbers from the sums over every worker (with the generated
        score's as :data:`GENERATED`, where there is one); ``instances``: the validation split's."""
        raise NotImplementedError
