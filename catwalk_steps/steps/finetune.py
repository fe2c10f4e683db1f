"""``catwalk::finetune``: fine-tuning whose result does not depend on how it was computed (device
count, interruptions). The step reads its settings into a :class:`..training.settings.FinetuneSettings`
(where they are documented and checked) and hands it to :mod:`..training.fine_tuning`, which
trains on this node's workers."""

import inspect
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from tango import Step
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler, Optimizer, TrainCallback
from tango.step import StepResources
from tango.workspace import Workspace

from ..distributed.devices import gpu_count
from ..distributed.nodes import RENDEZVOUS_TIMEOUT
from ..models.adapters import Adapter
from ..models.finetuned import FinetunedModel, FinetunedModelFormat
from ..models.loading import with_model_names
from ..tasks import Task
from ..tango_fixes.class_paths import keep_class_path
from ..tracking.settings import TRACKING_ARGUMENTS
from ..training.checkpoints import CHECKPOINTS
from ..training.eval_tasks import EvalTask
from ..training.fine_tuning import fine_tune, join_fine_tuning
from ..training.result import RESULT
from ..training.settings import FinetuneSettings, check_settings


@Step.register("catwalk::finetune")
@keep_class_path("catwalk_steps.finetune.FinetuneStep")
class FinetuneStep(Step):
    """Fine-tunes a causal LM as a rank classifier on the train splits of one or more tasks.

    The loss is the cross-entropy over each instance's choices, scored by summed log-likelihood;
    on generative tasks, the cross-entropy of the answer tokens (:mod:`catwalk_steps.kinds.generation`).
    ``batch_size`` is the global batch of every optimizer step; ``micro_batch_size`` (the memory
    knob, per device) cuts it into micro-batches that the ``device_count`` DDP workers share out,
    accumulating gradients. The micro-batches, and the dropout masks of each (seeded from the
    seed, the step and the micro-batch), are the same on any number of devices, and checkpoints
    hold the global state, so a run may be interrupted and resumed on other hardware. So
    ``device_count``, the device, the port, the logging interval and the callbacks are not part of
    the cache key (see :mod:`catwalk_steps.training`).

    The optimizer and learning-rate schedule are Tango's registrables, as ``torch::train`` takes
    them (``optimizer: {type: "torch::SGD", lr: 0.1}``, ``lr_scheduler: {type: "torch::StepLR",
    step_size: 10}``, or ``catwalk::linear_with_warmup`` / ``catwalk::cosine_with_warmup``); by
    default AdamW with ``learning_rate`` and ``weight_decay`` and a linear warm-up over
    ``warmup_fraction`` of the steps, then linear decay. Weight decay skips biases and
    normalisation weights (see :mod:`catwalk_steps.training.optimizers`).

    The result is a :class:`FinetunedModel`: the CPU weights of the best validation, cached as
    safetensors, and that validation's numbers, with the training curves (``history``).
    """

    VERSION = "cw3"  # cw3: contexts shared by their choices in training (shared_context)
    #: The version of a fine-tune under a chat template: one sequence per row, TRL's tokens and
    #: masks (:mod:`catwalk_steps.training.chat_rows`); results trained the earlier way are not reused.
    CHAT_VERSION = "cw3chat"
    FORMAT = FinetunedModelFormat()
    SKIP_ID_ARGUMENTS = {
        "device_count", "nodes", "max_restarts", "device", "strategy", "distributed_port", "log_every", "callbacks",
        "keep_checkpoints", *TRACKING_ARGUMENTS,
    }
    # New settings left at their defaults (today's training) keep existing keys.
    SKIP_DEFAULT_ARGUMENTS = {
        "optimizer": None, "lr_scheduler": None, "patience": None, "decay_biases_and_norms": False,
        "val_metric": None, "add_bos_token": None, "apply_chat_template": False, "completion_only_loss": None,
        "assistant_only_loss": None, "packing": False,
        "eval_tasks": None,
    }
    METADATA = {"artifact_kind": "model"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("apply_chat_template", False) is not False:
            self.VERSION = self.CHAT_VERSION  # before Tango's __init__, which may compute the unique id
        super().__init__(*args, **kwargs)

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        return with_model_names(check_settings(kwargs, _RUN_DEFAULTS))

    @property
    def resources(self) -> StepResources:
        return self.step_resources or StepResources(gpu_count=gpu_count(self.kwargs))

    def run(  # type: ignore[override]
        self,
        model: str,
        tasks: List[Task],
        *,
        tokenizer: Optional[str] = None,
        add_bos_token: Optional[bool] = None,
        apply_chat_template: Union[bool, str] = False,
        completion_only_loss: Optional[bool] = None,
        assistant_only_loss: Optional[bool] = None,
        config_overrides: Optional[Dict[str, Any]] = None,
        adapter: Optional[Adapter] = None,
        precision: str = "32",
        gradient_checkpointing: bool = False,
        shared_context: bool = True,
        packing: bool = False,
        batch_size: int = 32,
        micro_batch_size: Optional[int] = None,
        train_epochs: int = 1,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.0,
        warmup_fraction: float = 0.1,
        optimizer: Optional[Lazy[Optimizer]] = None,
        lr_scheduler: Optional[Lazy[LRScheduler]] = None,
        decay_biases_and_norms: bool = False,
        max_grad_norm: Optional[float] = 1.0,
        patience: Optional[int] = None,
        val_metric: Optional[str] = None,
        seed: int = 42,
        train_split: str = "train",
        validation_split: Optional[str] = "validation",
        train_limit: Optional[int] = None,
        validation_limit: Optional[int] = None,
        validate_every: Optional[int] = None,
        eval_tasks: Optional[List[Union[EvalTask, Task]]] = None,
        device_count: int = 1,
        nodes: int = 1,
        max_restarts: int = 0,
        strategy: str = "ddp",
        device: str = "auto",
        distributed_port: Optional[int] = None,
        log_every: int = 10,
        callbacks: Optional[List[Lazy[TrainCallback]]] = None,
        keep_checkpoints: bool = False,
        wandb_project: Optional[str] = None,
        wandb_entity: Optional[str] = None,
        wandb_group: Optional[str] = None,
        wandb_tags: Optional[List[str]] = None,
        wandb_name: Optional[str] = None,
        tensorboard_dir: Optional[str] = None,
    ) -> FinetunedModel:
        """Fine-tunes with these settings, each documented on
        :class:`catwalk_steps.training.settings.FinetuneSettings`."""
        settings = FinetuneSettings(**{name: value for name, value in locals().items() if name != "self"})
        return fine_tune(settings, self, self.workspace, self.work_dir)

    def join(self, workspace: Workspace, timeout: float = RENDEZVOUS_TIMEOUT) -> None:
        """Runs this machine's workers for a run of this step with ``nodes > 1`` whose node 0 is
        the process running the step (``tango run``), on the same workspace: waits up to
        ``timeout`` seconds for node 0's rendezvous endpoint, then trains with it until the
        workers end (see :mod:`..distributed.nodes`)."""
        # Tango's own resolution of the step's arguments (Lazy, sets, StepIndexer, ...), as in run_with_work_dir.
        settings = {**_RUN_DEFAULTS, **self._replace_steps_with_results(self.kwargs, workspace)}
        join_fine_tuning(FinetuneSettings(**settings), self, workspace, timeout)

    def clean_work_dir(self, work_dir: Path) -> None:
        """Called once the result is in the cache: the checkpoints go (unless ``keep_checkpoints``),
        and so does the result's second name in the work dir."""
        if not self.kwargs.get("keep_checkpoints"):
            shutil.rmtree(work_dir / CHECKPOINTS, ignore_errors=True)
        shutil.rmtree(work_dir / RESULT, ignore_errors=True)


#: ``run()``'s defaults: a knob the optimizer replaces is an error only when changed from its default.
_RUN_DEFAULTS = {
    name: p.default for name, p in inspect.signature(FinetuneStep.run).parameters.items() if p.default is not p.empty
}
