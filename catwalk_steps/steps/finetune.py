"""``catwalk::finetune``: rank-classification fine-tuning whose result does not depend on how it
was computed (device count, interruptions)."""

import inspect
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from tango import Step
from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler, Optimizer, TrainCallback
from tango.step import StepResources
from tango.workspace import Workspace

from ..distributed.devices import check_device_setting, gpu_count, worker_devices
from ..distributed.launch import Nodes, launch
from ..distributed.rendezvous import publish, wait_for_endpoint, withdraw
from ..models.adapters import Adapter, peft_config
from ..models.finetuned import FinetunedModel, FinetunedModelFormat
from ..models.loading import ModelSpec, with_model_names, context_window
from ..models.scoring import encode_pair
from ..tasks import MCInstance, Task
from ..tango_fixes.class_paths import keep_class_path
from ..tracking.settings import TRACKING_ARGUMENTS, check_tracking, tracking_of
from ..training.batches import BatchPlan
from ..training.callbacks import check_callbacks
from ..training.checkpoints import CHECKPOINTS
from ..training.generative import GENERATIVE, answer_examples, check_val_metric, selected_record_key, training_kind
from ..training.optimizers import check_schedule, named_lazy
from ..training.preflight import check_disk_space
from ..training.result import RESULT, finished
from ..training.result import WEIGHTS as RESULT_WEIGHTS

STRATEGIES = ("ddp", "fsdp")  # see training.strategies
#: Seconds a node waits for the others of a multi-node run to arrive.
RENDEZVOUS_TIMEOUT = 600


PRECISIONS = ("32", "bf16-mixed")


def _run_defaults() -> Dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(FinetuneStep.run).parameters.items()}


def check_batching(batch_size: int, micro_batch_size: Optional[int], device_count: int) -> int:
    """The micro-batch size, after checking that the global batch splits into whole micro-batches
    that the workers can share equally."""
    micro = batch_size if micro_batch_size is None else micro_batch_size
    if micro < 1 or batch_size % micro:
        raise ConfigurationError(f"micro_batch_size={micro} must be a positive divisor of batch_size={batch_size}")
    if (batch_size // micro) % device_count:
        raise ConfigurationError(
            f"batch_size={batch_size} makes {batch_size // micro} micro-batch(es) of {micro}, which "
            f"device_count={device_count} workers cannot share equally: set micro_batch_size (per device) so "
            f"that batch_size is a multiple of micro_batch_size*device_count, e.g. "
            f"micro_batch_size={batch_size // device_count} if that divides. It is part of the cache key: keep it "
            "when you change device_count, and you get the same model"
        )
    return micro


def tokenized_examples(tokenizer, instances: List[MCInstance], desc: str) -> List[Dict[str, Any]]:
    return [
        {
            "queries": [
                (list(query.context), list(query.continuation))
                for query in (encode_pair(tokenizer, context, c) for context, c in instance.pairs())
            ],
            "label": instance.label,
        }
        for instance in Tqdm.tqdm(instances, desc=desc)
    ]


@dataclass
class _Joining:
    """How a node other than 0 runs the step (see :meth:`FinetuneStep.join`)."""

    nodes: Nodes
    workspace: Workspace
    work_dir: Path


def _results_of_steps(value: Any, workspace: Workspace) -> Any:
    """``value`` with every step in it replaced by its cached result (node 0 computed them)."""
    if isinstance(value, Step):
        return workspace.step_cache[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_results_of_steps(v, workspace) for v in value)
    if isinstance(value, dict):
        return {k: _results_of_steps(v, workspace) for k, v in value.items()}
    return value


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
    _joining: Optional["_Joining"] = None
    METADATA = {"artifact_kind": "model"}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        if "grad_accum" in kwargs:
            raise ConfigurationError(
                "grad_accum was replaced by micro_batch_size (per device): each step accumulates "
                "batch_size / (micro_batch_size * device_count) micro-batches on every device"
            )
        for name in ("batch_size", "train_epochs", "log_every", "nodes"):
            if kwargs.get(name, 1) < 1:
                raise ConfigurationError(f"{name} must be at least 1, got {kwargs[name]}")
        if kwargs.get("validate_every") is not None and kwargs["validate_every"] < 1:
            raise ConfigurationError(f"validate_every must be at least 1, got {kwargs['validate_every']}")
        if kwargs.get("learning_rate", 1.0) <= 0:
            raise ConfigurationError(f"learning_rate must be positive, got {kwargs['learning_rate']}")
        kwargs["optimizer"] = named_lazy(kwargs.get("optimizer"), Optimizer)
        kwargs["lr_scheduler"] = named_lazy(kwargs.get("lr_scheduler"), LRScheduler)
        for name, knobs in (("optimizer", ("learning_rate", "weight_decay")), ("lr_scheduler", ("warmup_fraction",))):
            if kwargs[name] is None:
                del kwargs[name]  # as if not given: the key of today's training
                continue
            for knob in knobs:  # (Tango has filled in every default by now)
                if knob in kwargs and kwargs[knob] != _RUN_DEFAULTS[knob]:
                    raise ConfigurationError(
                        f"{knob} sets the default {name}, which {name} replaces: set it inside {name} instead"
                    )
        check_schedule(kwargs.get("lr_scheduler"))
        if kwargs.get("patience") is not None:
            if kwargs["patience"] < 1:
                raise ConfigurationError(f"patience must be at least 1, got {kwargs['patience']}")
            if kwargs.get("validation_split", "validation") is None:
                raise ConfigurationError("patience needs a validation_split to watch")
        check_callbacks(kwargs.get("callbacks"))
        check_tracking(kwargs)
        check_val_metric(kwargs)  # and that the tasks are all of one kind
        device_count = kwargs.get("device_count", 1)
        check_device_setting(kwargs.get("device", "auto"), device_count)
        if kwargs.get("max_restarts", 0) < 0:
            raise ConfigurationError(f"max_restarts must be at least 0, got {kwargs['max_restarts']}")
        check_batching(kwargs.get("batch_size", 32), kwargs.get("micro_batch_size"), device_count * kwargs.get("nodes", 1))
        if kwargs.get("strategy", "ddp") not in STRATEGIES:
            raise ConfigurationError(f"strategy must be one of {STRATEGIES}, got {kwargs['strategy']!r}")
        if kwargs.get("precision", "32") not in PRECISIONS:
            raise ConfigurationError(f"precision must be one of {PRECISIONS}, got {kwargs['precision']!r}")
        if kwargs.get("adapter") is not None:
            peft_config(kwargs["adapter"])
        ModelSpec.parse(kwargs.get("model", ""))
        return with_model_names(kwargs)

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
        from ..training.loop import TrainingJob, train_worker  # transformers, peft: only when training

        workspace, work_dir = (
            (self._joining.workspace, self._joining.work_dir) if self._joining else (self.workspace, self.work_dir)
        )

        spec = ModelSpec.parse(model, tokenizer=tokenizer, config_overrides=config_overrides or {})
        done = None if self._joining else self._result(work_dir, spec, adapter)
        if done is not None:  # a run killed after training, before its result was cached
            self.logger.info("Training had ended; its result is taken from %s", work_dir / RESULT)
            return done
        devices = worker_devices(device, device_count)  # before any model or data is loaded
        micro_batch_size = check_batching(batch_size, micro_batch_size, device_count * nodes)

        def instances(split: Optional[str], limit: Optional[int]) -> Optional[List[List[Any]]]:
            return None if split is None else [task.instances(split, limit) for task in tasks]

        # Both splits are read (a bad data file reported) before the tokenizer or any model is loaded.
        train_instances = instances(train_split, train_limit)
        validation_instances = instances(validation_split, validation_limit)
        tok = spec.load_tokenizer()
        config = spec.load_config()
        max_length = context_window(config)
        kind = training_kind(tasks)
        generative = kind == GENERATIVE

        def examples(split: Optional[str], per_task: Optional[List[List[Any]]]) -> Optional[List[Dict[str, Any]]]:
            if per_task is None:
                return None
            if generative:
                return answer_examples(tok, per_task, max_length, config.is_encoder_decoder, desc=f"Tokenizing {split}")
            return tokenized_examples(tok, [i for part in per_task for i in part], desc=f"Tokenizing {split}")

        train = examples(train_split, train_instances)
        plan = BatchPlan(len(train), batch_size, micro_batch_size, seed)
        if plan.steps_per_epoch == 0:
            raise ConfigurationError(f"{len(train)} training instances make no batch of {batch_size}")
        train_steps = plan.steps_per_epoch * train_epochs
        job = TrainingJob(
            spec=spec,
            train=train,
            validation=examples(validation_split, validation_instances),
            plan=plan,
            train_steps=train_steps,
            validate_every=validate_every or plan.steps_per_epoch,
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            warmup_steps=math.ceil(warmup_fraction * train_steps),
            max_grad_norm=max_grad_norm,
            pad_token_id=tok.pad_token_id,
            max_length=max_length,
            work_dir=work_dir,
            log_every=log_every,
            adapter=adapter,
            strategy=strategy,
            precision=precision,
            gradient_checkpointing=gradient_checkpointing,
            shared_context=shared_context,
            callbacks=callbacks,
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            decay_biases_and_norms=decay_biases_and_norms,
            patience=patience,
            generative=generative,
            selected=selected_record_key(kind, val_metric),
            tasks=tasks if val_metric == "exact_match" else None,
            workspace=workspace,
            step_id=self.unique_id,
            step_name=self.name,
            tracking=tracking_of(self, work_dir, wandb_project=wandb_project, wandb_entity=wandb_entity,
                                 wandb_group=wandb_group, wandb_tags=wandb_tags, wandb_name=wandb_name,
                                 tensorboard_dir=tensorboard_dir),
        )
        self.logger.info(
            "Training for %d steps of %d instances (%d micro-batches of %d) on %d node%s of %d %s worker%s (%s)",
            train_steps, batch_size, plan.micro_batches_per_step, micro_batch_size, nodes, "s" if nodes > 1 else "",
            device_count, devices[0].type, "s" if device_count > 1 else "", strategy,
        )
        check_disk_space(job, device_count * nodes)  # before any model is loaded
        if self._joining is not None:  # a node other than 0: its workers only
            launch(train_worker, devices, job, nodes=self._joining.nodes, max_restarts=max_restarts)
            return None  # type: ignore[return-value]
        meeting = publish(work_dir, nodes, distributed_port, RENDEZVOUS_TIMEOUT) if nodes > 1 else None
        try:
            launch(train_worker, devices, job, nodes=meeting or Nodes(endpoint=f"localhost:{distributed_port or 0}"),
                   max_restarts=max_restarts)
        finally:
            if meeting is not None:
                withdraw(work_dir, meeting)
        result = self._result(work_dir, spec, adapter)
        assert result is not None, "the workers ended without writing the result"
        return result

    def join(self, workspace: Workspace, timeout: float = RENDEZVOUS_TIMEOUT) -> None:
        """Runs this machine's workers for a run of this step with ``nodes > 1`` whose node 0 is
        the process running the step (``tango run``), on the same workspace: waits up to
        ``timeout`` seconds for node 0's rendezvous endpoint, then trains with it until the
        workers end. A rendezvous left by a node 0 that died is skipped: the next one is awaited."""
        from torch.distributed.elastic.rendezvous import RendezvousError

        work_dir, tried = workspace.work_dir(self), None
        while True:
            nodes = wait_for_endpoint(work_dir, timeout, not_run=tried)
            kwargs = {name: _results_of_steps(value, workspace) for name, value in self.kwargs.items()}
            self._joining = _Joining(nodes, workspace, work_dir)
            try:
                self.run(**kwargs)
                return
            except RendezvousError as e:
                self.logger.warning("The rendezvous of run %s failed (%s); waiting for node 0's next", nodes.run_id, e)
                tried = nodes.run_id
            finally:
                self._joining = None

    @staticmethod
    def _result(work_dir: Path, spec: ModelSpec, adapter: Optional[Adapter]) -> Optional[FinetunedModel]:
        """What a completed training wrote into ``work_dir`` (the best validation's weights, or
        the last step's), if it completed."""
        record = finished(work_dir)
        if record is None:
            return None
        return FinetunedModel(
            spec, training_metrics=record["training_metrics"], adapter=adapter,
            weights_file=work_dir / RESULT / RESULT_WEIGHTS, weights_meta=record["weights"],
        )

    def clean_work_dir(self, work_dir: Path) -> None:
        """Called once the result is in the cache: the checkpoints go (unless ``keep_checkpoints``),
        and so does the result's second name in the work dir."""
        if not self.kwargs.get("keep_checkpoints"):
            shutil.rmtree(work_dir / CHECKPOINTS, ignore_errors=True)
        shutil.rmtree(work_dir / RESULT, ignore_errors=True)


_RUN_DEFAULTS = _run_defaults()
