"""``catwalk::finetune``'s settings: what each means (:class:`FinetuneSettings`, the documentation
of the step's ``run()`` parameters) and their checks, run when the step graph is built (before any
step of a run starts), so that a typo or an impossible combination fails in one line, not after an
hour."""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from tango import Step
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler, Optimizer, TrainCallback

from ..distributed.devices import check_device_setting
from ..kinds import conversational_kinds
from ..models.adapters import Adapter, peft_config
from ..models.chat_templates import check_model_template
from ..models.loading import ModelSpec
from ..tasks import Task
from ..tasks.chat import check_chat_settings
from ..tasks.base import check_limit, check_prompts, check_split, holds_conversations
from ..tracking.settings import check_tracking
from .batches import micro_batch_size_for
from .eval_tasks import EvalTask, check_eval_tasks
from .callbacks import check_callbacks
from .trained_kind import check_val_metric, objective, trained_kind
from .optimizers import check_schedule, named_lazy


@dataclass(frozen=True)
class FinetuneSettings:
    """The settings of one ``catwalk::finetune`` run: its ``run()`` parameters, by the same names
    (whose defaults are ``run()``'s, where Tango reads them), each documented here."""

    model: str
    """``rc::<hub name or local directory>`` of the model to start from."""
    tasks: List[Task]
    """The tasks whose ``train_split`` (and ``validation_split``) to use."""
    tokenizer: Optional[str]
    """Hub name or directory of the tokenizer, if not the model's."""
    add_bos_token: Optional[bool]
    """Special tokens when encoding (:mod:`catwalk_steps.models.conventions`): the tokenizer's own
    (``None``: Llama, Mistral and Gemma add BOS, GPT-2 nothing), as lm-evaluation-harness 0.4.13 at
    its defaults, or forced on (``true``) or off (``false``). The fine-tuned model keeps the
    setting, so it is evaluated with the tokens it was trained on."""
    apply_chat_template: Union[bool, str]
    """Train on prompts as conversations in the model's chat template (``true``, or the name of
    one its tokenizer carries), as ``catwalk::predict`` builds them (:mod:`catwalk_steps.tasks.chat`):
    chat data (TRL's ``messages`` or ``prompt``/``completion`` rows of the ``generation`` task) is
    one sequence per row, tokenised and masked as TRL's ``SFTTrainer`` does
    (:mod:`catwalk_steps.training.chat_rows`; which tokens are learnt: ``completion_only_loss``,
    ``assistant_only_loss``); a multiple-choice task scores its choices after the assistant's turn
    begins. Nothing but what the template writes is added (no BOS of the tokenizer's own, unless
    ``add_bos_token``), and the result keeps the template: ``catwalk::predict`` evaluates it so."""
    completion_only_loss: Optional[bool]
    """TRL's setting of the same name: a prompt/completion row (of strings or of turns) learns
    its completion alone (unset or ``true``, TRL's default), or every token (``false``). See
    :mod:`catwalk_steps.training.chat_rows`."""
    assistant_only_loss: Optional[bool]
    """How a ``messages`` row is learnt: unset, each assistant turn as the template writes it, end
    of turn included (this project's default); ``false``, every token (TRL's default); ``true``,
    what the template marks with ``{% generation %}`` (TRL's ``assistant_only_loss``; a template
    without the markers is refused)."""
    config_overrides: Optional[Dict[str, Any]]
    """HF config values to change, e.g. dropouts set to 0."""
    adapter: Optional[Adapter]
    """Train a LoRA or IA3 adapter instead of every weight, e.g. ``{"type": "lora", "r": 8, "alpha": 16}``
    (see :mod:`catwalk_steps.models.adapters`). The result is then the adapter alone, applied to the base
    model when loaded."""
    precision: str
    """``"32"``, or ``"bf16-mixed"``: forward and backward passes under bfloat16 autocast, float32 master
    weights and optimizer state. Validation runs in float32."""
    gradient_checkpointing: bool
    """Recompute activations in the backward pass (less memory, about a third more compute)."""
    shared_context: bool
    """Encode each instance's context once for all its choices, in the forward and the backward pass: the
    loss and gradients of encoding every (context, choice) pair, for less work (measured 1.06-2.95x the
    examples/s, docs/benchmarks.md: the more, the longer the contexts and the larger the model). Under
    dropout the choices share the context's dropout mask, so the setting is in the cache key. Off with
    gradient checkpointing and for encoder-decoder models. Under FSDP it costs memory: each block runs
    twice per step, and autograd holds every block's whole gradient from the continuations' backward until
    the contexts' (4 bytes per parameter per worker at the peak, whatever the worker count;
    docs/benchmarks.md). ``false`` where that matters."""
    packing: bool
    """Generative tasks: pack the training rows into sequences of the model's window, as TRL's
    ``packing`` does (:mod:`catwalk_steps.training.packing`): best-fit decreasing, no attention
    across rows, the same loss and gradients as the rows unpacked. ``batch_size`` then counts packed
    sequences, as TRL's does. Validation stays unpacked. Causal LMs only."""
    batch_size: int
    """Instances per optimizer step, over all devices and micro-batches. Each epoch trains on
    ``len(train) // batch_size`` whole batches of a fresh permutation."""
    micro_batch_size: Optional[int]
    """Instances per forward pass on one device (default: ``batch_size``). ``batch_size`` must be a
    multiple of ``micro_batch_size * device_count``."""
    train_epochs: int
    """Passes over the train split, each in a fresh permutation."""
    learning_rate: float
    """The default optimizer's (AdamW's) learning rate."""
    weight_decay: float
    """The default optimizer's weight decay (of every weight but biases and normalisation weights, unless
    ``decay_biases_and_norms``)."""
    warmup_fraction: float
    """The default schedule's warm-up, as a fraction of the training steps (rounded up): the learning rate
    rises linearly from 0, then falls linearly to 0."""
    optimizer: Optional[Lazy[Optimizer]]
    """A Tango ``Optimizer`` (``{type: "torch::AdamW", lr: 2e-5, weight_decay: 0.01}``), built on each
    worker with the trainable parameters in two groups: biases and normalisation weights (LayerNorm,
    RMSNorm, ...) get ``weight_decay: 0``, the others the optimizer's own. Replaces ``learning_rate`` and
    ``weight_decay`` (setting them to other than their defaults too is an error). In the cache key."""
    lr_scheduler: Optional[Lazy[LRScheduler]]
    """A Tango ``LRScheduler`` (``{type: "torch::StepLR", step_size: 10}``, ``{type:
    "catwalk::cosine_with_warmup", warmup_fraction: 0.06}``), stepped after every optimizer step; one
    whose constructor takes ``num_training_steps`` gets the step count unless given. Replaces
    ``warmup_fraction``. In the cache key."""
    decay_biases_and_norms: bool
    """Decay biases and normalisation weights too."""
    max_grad_norm: Optional[float]
    """The total gradient norm each optimizer step clips to (``None``: no clipping)."""
    patience: Optional[int]
    """Stop after this many validations in a row without a better validation (by ``val_metric``) than the
    best before them. The result is still the best validation's weights;
    ``training_metrics["stopped_at"]`` says where it stopped; a stopped run resumed from its checkpoint
    stays stopped. In the cache key when set."""
    val_metric: Optional[str]
    """What chooses the best validation (and what ``patience`` watches): ``"accuracy"`` (multiple choice's
    default) or ``"loss"`` (the lowest); for generative tasks ``"loss"`` (their default: cross-entropy per
    answer token) or ``"exact_match"`` (greedy generations on the validation split, scored by each task's
    rule; not under ``fsdp`` on several workers); or ``"eval/TASK/METRIC"``, a number of ``eval_tasks``
    (the highest, or the lowest for perplexities, ``bits_per_byte``, ``ece`` and ``brier``). In the cache key
    unless the default."""
    seed: int
    """What the batch order, each micro-batch's dropout and any freshly initialised weights (an adapter's)
    are derived from (:mod:`.seeds`): the same on any device count."""
    train_split: str
    """The split of each task to train on."""
    validation_split: Optional[str]
    """The split of each task to validate on, or ``None``: no validation (the result is the last step's
    weights)."""
    train_limit: Optional[int]
    """Train on the first ``train_limit`` instances of each task's split only."""
    validation_limit: Optional[int]
    """Validate on the first ``validation_limit`` instances of each task's split only."""
    eval_tasks: Optional[List[Union[EvalTask, Task]]]
    """Downstream tasks scored at every validation on the in-memory weights, each as
    ``catwalk::predict`` + ``catwalk::calculate_metrics`` score the result (multiple choice,
    generation, perplexity, ``lm_eval`` tasks; under the result's chat template, if any), its
    instances shared out over all the workers: a task (``{type: "piqa"}``), or a task with the predict
    settings it is scored with, ``{task: {type: "piqa"}, split: "validation", limit: 500, unconditioned:
    false, name: "piqa"}`` (:class:`.eval_tasks.EvalTask`). Their numbers are in every validation record
    as ``eval[TASK][METRIC]`` (so ``training_metrics["eval"]`` for the returned weights and in
    ``history``), logged as ``eval/TASK/METRIC``; ``val_metric: "eval/TASK/METRIC"`` chooses by one.
    Needs a ``validation_split``. Under ``fsdp`` each worker holds the whole model while it scores (its
    memory then). In the cache key when set."""
    validate_every: Optional[int]
    """Steps between validations, each followed by a checkpoint; by default, every epoch. The returned
    weights are those of the best validation (by ``val_metric``; of equal accuracies, the lowest loss), or
    of the last step without a ``validation_split``."""
    device_count: int
    """Workers per node: CUDA devices 0..N-1, or CPU processes sharing out the cores."""
    nodes: int
    """Machines training together, each with ``device_count`` workers. This process is node 0; every other
    node runs ``python -m catwalk_steps.join CONFIG STEP_NAME -w WORKSPACE`` (see
    :mod:`catwalk_steps.join`). ``batch_size`` must be a multiple of ``micro_batch_size * device_count *
    nodes``. Not in the cache key."""
    max_restarts: int
    """How often torch's elastic agents restart the workers after one fails (they resume from the last
    checkpoint; the result is an uninterrupted run's). Not in the cache key."""
    strategy: str
    """``"ddp"`` (a full replica per worker) or ``"fsdp"`` (parameters, gradients and optimizer state
    sharded over the workers, with torch's ``fully_shard``). The same model either way, within float
    summation order, so not part of the cache key."""
    device: str
    """``"auto"`` (CUDA if present), ``"cuda"`` (``"cuda:1"`` for one worker) or ``"cpu"``, decided where
    the step runs: a step for GPUs can be built on a host without one."""
    distributed_port: Optional[int]
    """The TCP port of the workers' rendezvous; by default the operating system picks a free one, so
    parallel steps cannot collide."""
    log_every: int
    """Steps between records of the training loss (in ``training_metrics["history"]``, and for callbacks'
    ``log_batch``)."""
    callbacks: Optional[List[Lazy[TrainCallback]]]
    """Tango ``TrainCallback``s, e.g. ``{type: "wandb::log"}`` (with ``tango.integrations.wandb`` in
    ``include_package`` and ``wandb`` installed), called as Tango's loop calls them
    (:mod:`catwalk_steps.training.callbacks`); their state is saved with checkpoints. They are not in the
    cache key, so they must only observe training: one that raises ``StopEarly`` fails the step (use
    ``patience``)."""
    keep_checkpoints: bool
    """Keep the checkpoints (the latest and the best: sharded weights and optimizer state, for continuing
    training) once the result is cached; by default they are deleted then, and the cache entry holds the
    result alone. Not in the cache key."""
    wandb_project: Optional[str]
    """Log the run to this W&B project (needs the ``wandb`` extra): the config, the training loss,
    learning rate, gradient norm, throughput and peak memory every ``log_every`` steps, every validation,
    the best one in the summary. One W&B run per step (global rank 0 logs), continued when the step
    resumes; offline when the server cannot be had (see :mod:`catwalk_steps.tracking.training`). Not in
    the cache key."""
    wandb_entity: Optional[str]
    """The W&B team or user (default: yours)."""
    wandb_group: Optional[str]
    """The W&B group, e.g. a sweep's name."""
    wandb_tags: Optional[List[str]]
    """W&B tags of the run."""
    wandb_name: Optional[str]
    """The W&B run's display name (default: the step's name)."""
    tensorboard_dir: Optional[str]
    """Also write the same numbers as TensorBoard event files into ``<tensorboard_dir>/<step name>-<id>``.
    Not in the cache key."""


    @property
    def workers(self) -> int:
        """Workers over all nodes."""
        return self.device_count * self.nodes

    def model_spec(self) -> ModelSpec:
        """The model trained, as the result keeps it. Under a chat template, training encodes as
        TRL does (no special token but what the template writes, unless ``add_bos_token`` says
        otherwise), and the result keeps the template and that setting, so that it is evaluated
        on the tokens it was trained on."""
        chat = self.apply_chat_template is not False
        add_bos_token = False if chat and self.add_bos_token is None else self.add_bos_token
        return ModelSpec.parse(
            self.model, tokenizer=self.tokenizer, config_overrides=self.config_overrides or {},
            add_bos_token=add_bos_token, chat_template=self.apply_chat_template if chat else None,
        )


STRATEGIES = ("ddp", "fsdp")  # see .strategies
PRECISIONS = ("32", "bf16-mixed")


def check_settings(kwargs: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, Any]:
    """``kwargs`` (Tango's, defaults filled in) checked, with ``optimizer``/``lr_scheduler`` as
    ``Lazy`` registrables, or left out when not set (so that today's keys hold). ``defaults``: the
    step's own, to tell a knob the optimizer or schedule replaces from one left alone."""
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
    for name in ("train_limit", "validation_limit"):
        check_limit(name, kwargs.get(name))
    if not 0 <= kwargs.get("warmup_fraction", 0) <= 1:
        raise ConfigurationError(f"warmup_fraction must be between 0 and 1, got {kwargs['warmup_fraction']}")
    if kwargs.get("weight_decay", 0) < 0:
        raise ConfigurationError(f"weight_decay must be at least 0, got {kwargs['weight_decay']}")
    if kwargs.get("max_grad_norm") is not None and kwargs["max_grad_norm"] <= 0:
        raise ConfigurationError(
            f"max_grad_norm must be positive (or null: no clipping), got {kwargs['max_grad_norm']}"
        )
    if kwargs.get("learning_rate", 1.0) <= 0:
        raise ConfigurationError(f"learning_rate must be positive, got {kwargs['learning_rate']}")
    kwargs["optimizer"] = named_lazy(kwargs.get("optimizer"), Optimizer)
    kwargs["lr_scheduler"] = named_lazy(kwargs.get("lr_scheduler"), LRScheduler)
    for name, knobs in (("optimizer", ("learning_rate", "weight_decay")), ("lr_scheduler", ("warmup_fraction",))):
        if kwargs[name] is None:
            del kwargs[name]  # as if not given: the key of today's training
            continue
        for knob in knobs:  # (Tango has filled in every default by now)
            if knob in kwargs and kwargs[knob] != defaults[knob]:
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
    check_eval_tasks(kwargs)
    check_val_metric(kwargs)  # and that the tasks are all of one kind
    conversations = any(holds_conversations(task, kwargs.get(name, defaults.get(name)))
                        for task in kwargs.get("tasks") or [] for name in ("train_split", "validation_split"))
    check_model_template(kwargs, conversations)  # a tokenizer without a template named before the data asks for one
    for task in kwargs.get("tasks") or []:
        for name in ("train_split", "validation_split"):
            check_split(name, task, kwargs.get(name, defaults.get(name)))
            check_prompts(task, kwargs.get(name, defaults.get(name)), kwargs.get("apply_chat_template", False) is not False)
    device_count = kwargs.get("device_count", 1)
    check_device_setting(kwargs.get("device", "auto"), device_count)
    if kwargs.get("max_restarts", 0) < 0:
        raise ConfigurationError(f"max_restarts must be at least 0, got {kwargs['max_restarts']}")
    micro_batch_size_for(kwargs.get("batch_size", 32), kwargs.get("micro_batch_size"), device_count * kwargs.get("nodes", 1))
    if kwargs.get("strategy", "ddp") not in STRATEGIES:
        raise ConfigurationError(f"strategy must be one of {STRATEGIES}, got {kwargs['strategy']!r}")
    if kwargs.get("precision", "32") not in PRECISIONS:
        raise ConfigurationError(f"precision must be one of {PRECISIONS}, got {kwargs['precision']!r}")
    if kwargs.get("adapter") is not None:
        peft_config(kwargs["adapter"])
    ModelSpec.parse(kwargs.get("model", ""))
    check_chat_settings({"apply_chat_template": kwargs.get("apply_chat_template", False)}, kwargs.get("tasks") or [],
                        conversational_kinds())
    check_learnt_tokens(kwargs)
    return kwargs


def check_learnt_tokens(kwargs: Dict[str, Any]) -> None:
    """``completion_only_loss``, ``assistant_only_loss`` and ``packing`` are for kinds that learn
    token sequences, generative tasks' (the first two for chat data)."""
    tasks = [task for task in kwargs.get("tasks") or [] if not isinstance(task, Step)]
    # (tasks other steps make: checked when run)
    learns_sequences = not tasks or objective(trained_kind(tasks)).learns_sequences
    for name in ("completion_only_loss", "assistant_only_loss"):
        value = kwargs.get(name)
        if value not in (None, True, False):
            raise ConfigurationError(f"{name} must be true, false or unset (null), got {value!r}")
        if value is not None and not learns_sequences:
            raise ConfigurationError(f"{name} says which tokens of chat data are learnt: it is for generative tasks")
    if kwargs.get("packing") and not learns_sequences:
        raise ConfigurationError("packing packs the rows of generative tasks; multiple-choice training scores each "
                                 "instance's choices together (shared_context saves their common context instead)")
    if kwargs.get("assistant_only_loss") is not None and kwargs.get("apply_chat_template", False) is False:
        raise ConfigurationError("assistant_only_loss says how conversations are learnt, which needs apply_chat_template")
