"""``catwalk::finetune``: fine-tuning whose result does not depend on how it was computed (device
count, interruptions). The step reads its settings; :mod:`..training.settings` checks them,
:mod:`..training.preparation` turns them into a job, :mod:`..distributed.nodes` starts the workers
of :mod:`..training.loop`."""

import inspect
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from tango import Step
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler, Optimizer, TrainCallback
from tango.step import StepResources
from tango.workspace import Workspace

from ..distributed.devices import gpu_count, worker_devices
from ..distributed.nodes import RENDEZVOUS_TIMEOUT, run_as_joining_node, run_as_node_zero
from ..models.adapters import Adapter
from ..models.finetuned import FinetunedModel, FinetunedModelFormat
from ..models.loading import ModelSpec, with_model_names
from ..tasks import Task
from ..tango_fixes.class_paths import keep_class_path
from ..tracking.settings import TRACKING_ARGUMENTS, tracking_of
from ..training.checkpoints import CHECKPOINTS
from ..training.result import RESULT, finished_model
from ..training.settings import check_settings


@Step.register("catwalk::finetune")
@keep_class_path("catwalk_steps.finetune.FinetuneStep")
class FinetuneStep(Step):
    """Fine-tunes a causal LM as a rank classifier on the train splits of one or more tasks.

    The loss is the cross-entropy over each instance's choices, scored by summed log-likelihood;
    on generative tasks, the cross-entropy of the answer tokens (:mod:`catwalk_steps.training.generative`).
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
    FORMAT = FinetunedModelFormat()
    SKIP_ID_ARGUMENTS = {
        "device_count", "nodes", "max_restarts", "device", "strategy", "distributed_port", "log_every", "callbacks",
        "keep_checkpoints", *TRACKING_ARGUMENTS,
    }
    # New settings left at their defaults (today's training) keep existing keys.
    SKIP_DEFAULT_ARGUMENTS = {
        "optimizer": None, "lr_scheduler": None, "patience": None, "decay_biases_and_norms": False,
        "val_metric": None,
    }
    METADATA = {"artifact_kind": "model"}

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
        config_overrides: Optional[Dict[str, Any]] = None,
        adapter: Optional[Adapter] = None,
        precision: str = "32",
        gradient_checkpointing: bool = False,
        shared_context: bool = True,
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
        """
        :param model: ``rc::<hub name or local directory>`` of the model to start from.
        :param tasks: the tasks whose ``train_split`` (and ``validation_split``) to use.
        :param tokenizer: hub name or directory of the tokenizer, if not the model's.
        :param config_overrides: HF config values to change, e.g. dropouts set to 0.
        :param adapter: train a LoRA or IA3 adapter instead of every weight, e.g. ``{"type": "lora",
            "r": 8, "alpha": 16}`` (see :mod:`catwalk_steps.models.adapters`). The result is then
            the adapter alone, applied to the base model when loaded.
        :param precision: ``"32"``, or ``"bf16-mixed"``: forward and backward passes under bfloat16
            autocast, float32 master weights and optimizer state. Validation runs in float32.
        :param gradient_checkpointing: recompute activations in the backward pass (less memory,
            about a third more compute).
        :param shared_context: encode each instance's context once for all its choices, in the
            forward and the backward pass: the loss and gradients of encoding every (context,
            choice) pair, for less work (measured 1.06-2.95x the examples/s, docs/benchmarks.md:
            the more, the longer the contexts and the larger the model). Under dropout
            the choices share the context's dropout mask, so the setting is in the cache key. Off
            with gradient checkpointing and for encoder-decoder models. Under FSDP it costs memory:
            each block runs twice per step, and autograd holds every block's whole gradient from
            the continuations' backward until the contexts' (4 bytes per parameter per worker at
            the peak, whatever the worker count; docs/benchmarks.md). ``false`` where that matters.
        :param batch_size: instances per optimizer step, over all devices and micro-batches. Each
            epoch trains on ``len(train) // batch_size`` whole batches of a fresh permutation.
        :param micro_batch_size: instances per forward pass on one device (default: ``batch_size``).
            ``batch_size`` must be a multiple of ``micro_batch_size * device_count``.
        :param learning_rate: the default optimizer's (AdamW's) learning rate.
        :param weight_decay: the default optimizer's weight decay (of every weight but biases and
            normalisation weights, unless ``decay_biases_and_norms``).
        :param warmup_fraction: the default schedule's warm-up, as a fraction of the training
            steps (rounded up): the learning rate rises linearly from 0, then falls linearly to 0.
        :param optimizer: a Tango ``Optimizer`` (``{type: "torch::AdamW", lr: 2e-5, weight_decay:
            0.01}``), built on each worker with the trainable parameters in two groups: biases and
            normalisation weights (LayerNorm, RMSNorm, ...) get ``weight_decay: 0``, the others the
            optimizer's own. Replaces ``learning_rate`` and ``weight_decay`` (setting them to other
            than their defaults too is an error). In the cache key.
        :param lr_scheduler: a Tango ``LRScheduler`` (``{type: "torch::StepLR", step_size: 10}``,
            ``{type: "catwalk::cosine_with_warmup", warmup_fraction: 0.06}``), stepped after every
            optimizer step; one whose constructor takes ``num_training_steps`` gets the step count
            unless given. Replaces ``warmup_fraction``. In the cache key.
        :param decay_biases_and_norms: decay biases and normalisation weights too.
        :param patience: stop after this many validations in a row without a better validation
            (by ``val_metric``) than the best before them. The result is still the best validation's weights;
            ``training_metrics["stopped_at"]`` says where it stopped; a stopped run resumed from its
            checkpoint stays stopped. In the cache key when set.
        :param val_metric: what chooses the best validation (and what ``patience`` watches):
            ``"accuracy"`` (multiple choice's default) or ``"loss"`` (the lowest); for generative
            tasks ``"loss"`` (their default: cross-entropy per answer token) or ``"exact_match"``
            (greedy generations on the validation split, scored by each task's rule; not under
            ``fsdp`` on several workers). In the cache key unless the default.
        :param validate_every: steps between validations, each followed by a checkpoint; by
            default, every epoch. The returned weights are those of the best validation (by
            ``val_metric``; of equal accuracies, the lowest loss), or of the last step without a
            ``validation_split``.
        :param strategy: ``"ddp"`` (a full replica per worker) or ``"fsdp"`` (parameters, gradients
            and optimizer state sharded over the workers, with torch's ``fully_shard``). The same
            model either way, within float summation order, so not part of the cache key.
        :param device_count: workers per node: CUDA devices 0..N-1, or CPU processes sharing out
            the cores.
        :param nodes: machines training together, each with ``device_count`` workers. This process
            is node 0; every other node runs ``python -m catwalk_steps.join CONFIG STEP_NAME -w
            WORKSPACE`` (see :mod:`catwalk_steps.join`). ``batch_size`` must be a multiple of
            ``micro_batch_size * device_count * nodes``. Not in the cache key.
        :param max_restarts: how often torch's elastic agents restart the workers after one
            fails (they resume from the last checkpoint; the result is an uninterrupted run's).
            Not in the cache key.
        :param device: ``"auto"`` (CUDA if present), ``"cuda"`` (``"cuda:1"`` for one worker) or
            ``"cpu"``, decided where the step runs: a step for GPUs can be built on a host without one.
        :param distributed_port: the TCP port of the workers' rendezvous; by default the operating
            system picks a free one, so parallel steps cannot collide.
        :param log_every: steps between records of the training loss (in
            ``training_metrics["history"]``, and for callbacks' ``log_batch``).
        :param callbacks: Tango ``TrainCallback``s, e.g. ``{type: "wandb::log"}`` (with
            ``tango.integrations.wandb`` in ``include_package`` and ``wandb`` installed), called
            as Tango's loop calls them (:mod:`catwalk_steps.training.callbacks`); their state is
            saved with checkpoints. They are not in the cache key, so they must only observe
            training: one that raises ``StopEarly`` fails the step (use ``patience``).
        :param keep_checkpoints: keep the checkpoints (the latest and the best: sharded weights and
            optimizer state, for continuing training) once the result is cached; by default they
            are deleted then, and the cache entry holds the result alone. Not in the cache key.
        :param wandb_project: log the run to this W&B project (needs the ``wandb`` extra): the
            config, the training loss, learning rate, gradient norm, throughput and peak memory
            every ``log_every`` steps, every validation, the best one in the summary. One W&B run
            per step (global rank 0 logs), continued when the step resumes; offline when the
            server cannot be had (see :mod:`catwalk_steps.training.tracking`). Not in the cache key.
        :param wandb_entity: the W&B team or user (default: yours).
        :param wandb_group: the W&B group, e.g. a sweep's name.
        :param wandb_tags: W&B tags of the run.
        :param wandb_name: the W&B run's display name (default: the step's name).
        :param tensorboard_dir: also write the same numbers as TensorBoard event files into
            ``<tensorboard_dir>/<step name>-<id>``. Not in the cache key.
        """
        settings = {name: value for name, value in locals().items() if name != "self"}
        spec = ModelSpec.parse(model, tokenizer=tokenizer, config_overrides=config_overrides or {})
        done = finished_model(self.work_dir, spec, adapter)
        if done is not None:  # a run killed after training, before its result was cached
            self.logger.info("Training had ended; its result is taken from %s", self.work_dir / RESULT)
            return done
        start = self._workers(settings, spec, self.workspace, self.work_dir)
        run_as_node_zero(start, self.work_dir, nodes, distributed_port)
        result = finished_model(self.work_dir, spec, adapter)
        assert result is not None, "the workers ended without writing the result"
        return result

    def join(self, workspace: Workspace, timeout: float = RENDEZVOUS_TIMEOUT) -> None:
        """Runs this machine's workers for a run of this step with ``nodes > 1`` whose node 0 is
        the process running the step (``tango run``), on the same workspace: waits up to
        ``timeout`` seconds for node 0's rendezvous endpoint, then trains with it until the
        workers end (see :mod:`..distributed.nodes`)."""
        # Tango's own resolution of the step's arguments (Lazy, sets, StepIndexer, ...), as in run_with_work_dir.
        settings = {**_RUN_DEFAULTS, **self._replace_steps_with_results(self.kwargs, workspace)}
        settings.pop("self", None)
        spec = ModelSpec.parse(settings["model"], tokenizer=settings["tokenizer"],
                               config_overrides=settings["config_overrides"] or {})
        work_dir = workspace.work_dir(self)
        run_as_joining_node(self._workers(settings, spec, workspace, work_dir), work_dir, timeout)

    def _workers(self, settings: Dict[str, Any], spec: ModelSpec, workspace: Workspace, work_dir: Path):
        """What starts this node's workers on the job ``settings`` describe. The devices are
        checked, and the data read, before any model is loaded."""
        from ..distributed.launch import launch
        from ..training.loop import train_worker  # transformers, peft: only when training
        from ..training.preflight import check_disk_space
        from ..training.preparation import training_job

        devices = worker_devices(settings["device"], settings["device_count"])
        tracking = tracking_of(self, work_dir, **{name: settings[name] for name in TRACKING_ARGUMENTS})
        job = training_job(settings, spec, work_dir=work_dir, workspace=workspace, step_id=self.unique_id,
                           step_name=self.name, tracking=tracking)
        workers = settings["device_count"] * settings["nodes"]
        self.logger.info(
            "Training for %d steps of %d instances (%d micro-batches of %d) on %d worker%s (%s, %s)",
            job.train_steps, job.plan.batch_size, job.plan.micro_batches_per_step, job.plan.micro_batch_size,
            workers, "s" if workers > 1 else "", devices[0].type, settings["strategy"],
        )
        check_disk_space(job, workers)  # before any model is loaded
        return lambda nodes: launch(train_worker, devices, job, nodes=nodes, max_restarts=settings["max_restarts"])

    def clean_work_dir(self, work_dir: Path) -> None:
        """Called once the result is in the cache: the checkpoints go (unless ``keep_checkpoints``),
        and so does the result's second name in the work dir."""
        if not self.kwargs.get("keep_checkpoints"):
            shutil.rmtree(work_dir / CHECKPOINTS, ignore_errors=True)
        shutil.rmtree(work_dir / RESULT, ignore_errors=True)


#: ``run()``'s defaults: a knob the optimizer replaces is an error only when changed from its default.
_RUN_DEFAULTS = {name: p.default for name, p in inspect.signature(FinetuneStep.run).parameters.items()}
