"""The optimizer and learning-rate schedule of fine-tuning, built per worker as Tango's
``torch::train`` builds them: from ``Lazy[Optimizer]`` and ``Lazy[LRScheduler]`` registrables
(``torch::AdamW``, ``torch::SGD``, ``torch::StepLR``, ...), with the trainable parameters.

Weight decay convention: biases and the weights of normalisation layers (LayerNorm, RMSNorm,
GroupNorm, BatchNorm, and any module whose class name contains ``Norm``, such as T5's and
Llama's) are not decayed. They go into a parameter group of their own with ``weight_decay: 0``;
every other trainable parameter is decayed by the optimizer's ``weight_decay``. Set
``decay_biases_and_norms: true`` on the step to decay every parameter.

Also registered here, since Tango's transformers integration (which has HF's schedules) does not
import under transformers 5: ``catwalk::linear_with_warmup`` and ``catwalk::cosine_with_warmup``.
The step fills in their ``num_training_steps`` (and that of any scheduler whose constructor takes
one, and that the config leaves out).
"""

import inspect
import math
from typing import Any, Dict, List, Optional

import torch
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler

#: What a scheduler that needs the length of training is given (HF's name for it).
NUM_TRAINING_STEPS = "num_training_steps"
_NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._NormBase)


def _warmup_steps(num_training_steps: int, warmup_steps: Optional[int], warmup_fraction: Optional[float]) -> int:
    if warmup_steps is not None and warmup_fraction is not None:
        raise ConfigurationError("Give warmup_steps or warmup_fraction, not both")
    if warmup_fraction is not None:
        if not 0 <= warmup_fraction <= 1:
            raise ConfigurationError(f"warmup_fraction must be between 0 and 1, got {warmup_fraction}")
        return math.ceil(warmup_fraction * num_training_steps)
    if warmup_steps is not None and warmup_steps < 0:
        raise ConfigurationError(f"warmup_steps must be at least 0, got {warmup_steps}")
    return warmup_steps or 0


def _check_length(num_training_steps: Optional[int]) -> int:
    if num_training_steps is None or num_training_steps < 1:
        raise ConfigurationError(f"num_training_steps must be at least 1, got {num_training_steps}")
    return num_training_steps


@LRScheduler.register("catwalk::linear_with_warmup")
class LinearWithWarmup(torch.optim.lr_scheduler.LambdaLR):
    """The learning rate rises linearly from 0 over the warm-up steps, then falls linearly to 0
    at ``num_training_steps`` (HF's ``get_linear_schedule_with_warmup``, the same numbers).
    ``warmup_steps`` or ``warmup_fraction`` (of ``num_training_steps``, rounded up); no warm-up
    by default."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        num_training_steps: Optional[int] = None,
        warmup_steps: Optional[int] = None,
        warmup_fraction: Optional[float] = None,
        last_epoch: int = -1,
    ) -> None:
        total = _check_length(num_training_steps)
        warmup = _warmup_steps(total, warmup_steps, warmup_fraction)
        self.num_training_steps, self.warmup_steps = total, warmup

        def factor(step: int) -> float:
            if step < warmup:
                return float(step) / float(max(1, warmup))
            return max(0.0, float(total - step) / float(max(1, total - warmup)))

        super().__init__(optimizer, factor, last_epoch)


@LRScheduler.register("catwalk::cosine_with_warmup")
class CosineWithWarmup(torch.optim.lr_scheduler.LambdaLR):
    """Linear warm-up from 0 (as ``catwalk::linear_with_warmup``), then a cosine decay from the
    peak to ``min_lr_ratio`` times it at ``num_training_steps``, over ``num_cycles`` cycles
    (0.5: one half cosine, HF's ``get_cosine_schedule_with_warmup``)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        num_training_steps: Optional[int] = None,
        warmup_steps: Optional[int] = None,
        warmup_fraction: Optional[float] = None,
        num_cycles: float = 0.5,
        min_lr_ratio: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        total = _check_length(num_training_steps)
        warmup = _warmup_steps(total, warmup_steps, warmup_fraction)
        if not 0 <= min_lr_ratio <= 1:
            raise ConfigurationError(f"min_lr_ratio must be between 0 and 1, got {min_lr_ratio}")
        self.num_training_steps, self.warmup_steps = total, warmup

        def factor(step: int) -> float:
            if step < warmup:
                return float(step) / float(max(1, warmup))
            progress = float(step - warmup) / float(max(1, total - warmup))
            cosine = max(0.0, 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress)))
            return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

        super().__init__(optimizer, factor, last_epoch)


def lazy_class(lazy: Lazy, base: type) -> Optional[type]:
    """The class ``lazy`` constructs, where it can be told without constructing it."""
    constructor = lazy._constructor
    params = lazy._params
    if isinstance(constructor, type) and issubclass(constructor, base):
        kind = params.get("type") if params is not None else None
        if kind is None:
            return constructor if constructor is not base else None
        try:
            resolved, _ = base.resolve_class_name(kind)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 (an unknown type fails with Tango's own message when built)
            return None
        return resolved if isinstance(resolved, type) else None
    return constructor if isinstance(constructor, type) else None


def check_schedule(lr_scheduler: Optional[Lazy]) -> None:
    """Fails early for a schedule our loop cannot step (it steps once per optimizer step, with
    no metric, as Tango's loop does)."""
    if lr_scheduler is None:
        return
    cls = lazy_class(lr_scheduler, LRScheduler)
    if cls is not None and issubclass(cls, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ConfigurationError(
            f"{cls.__name__} steps on a metric; the schedule is stepped after every optimizer step without one"
        )


def parameter_groups(
    model: torch.nn.Module, decay_biases_and_norms: bool = False
) -> List[Dict[str, Any]]:
    """The trainable parameters of ``model``, in its order: one group to decay, and one (biases
    and normalisation weights, ``weight_decay: 0``) not to, unless ``decay_biases_and_norms``.
    Empty groups are left out."""
    decay, no_decay = [], []
    seen = set()
    for module_name, module in model.named_modules():
        is_norm = isinstance(module, _NORMS) or "norm" in type(module).__name__.lower()
        for name, parameter in module.named_parameters(recurse=False):
            if not parameter.requires_grad or id(parameter) in seen:
                continue
            seen.add(id(parameter))
            (no_decay if not decay_biases_and_norms and (is_norm or name == "bias") else decay).append(parameter)
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def build_optimizer(
    model: torch.nn.Module,
    optimizer: Optional[Lazy],
    learning_rate: float,
    weight_decay: float,
    decay_biases_and_norms: bool = False,
) -> torch.optim.Optimizer:
    """``optimizer`` built with ``model``'s trainable parameters in groups (see the module's
    docstring); by default AdamW with ``learning_rate`` and ``weight_decay``. The default with
    ``weight_decay: 0`` keeps one group, as before there were groups (so its checkpoints load)."""
    if optimizer is None:
        if weight_decay == 0 or decay_biases_and_norms:
            trainable = [p for p in model.parameters() if p.requires_grad]
            return torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=weight_decay)
        return torch.optim.AdamW(parameter_groups(model), lr=learning_rate, weight_decay=weight_decay)
    return optimizer.construct(params=parameter_groups(model, decay_biases_and_norms))


def build_schedule(
    lr_scheduler: Optional[Lazy], optimizer: torch.optim.Optimizer, train_steps: int, warmup_steps: int
):
    """``lr_scheduler`` built for ``optimizer``, given ``num_training_steps`` if it takes one that
    its config leaves out; by default a linear warm-up over ``warmup_steps``, then linear decay."""
    if lr_scheduler is None:
        return LinearWithWarmup(optimizer, num_training_steps=train_steps, warmup_steps=warmup_steps)
    extras: Dict[str, Any] = {}
    cls = lazy_class(lr_scheduler, LRScheduler)
    given = set(lr_scheduler._params.keys()) | set(lr_scheduler._constructor_extras)
    if cls is not None and NUM_TRAINING_STEPS in inspect.signature(cls.__init__).parameters and NUM_TRAINING_STEPS not in given:
        extras[NUM_TRAINING_STEPS] = train_steps
    return lr_scheduler.construct(optimizer=optimizer, **extras)


def named_lazy(value: Any, base: type) -> Any:
    """A config's ``{type: ..., ...}`` (or a registered name) as the ``Lazy`` Tango would build
    from it: lets Python code pass the same dicts as a config file."""
    from tango.common import Params

    if value is None or isinstance(value, Lazy):
        return value
    if isinstance(value, str):
        value = {"type": value}
    if isinstance(value, dict):
        return Lazy(base, Params(dict(value)))
    raise ConfigurationError(f"Expected a {base.__name__} config (a dict with a 'type'), got {value!r}")
