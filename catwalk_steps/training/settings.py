"""``catwalk::finetune``'s settings, checked when the step graph is built (before any step of a
run starts), so that a typo or an impossible combination fails in one line, not after an hour."""

from typing import Any, Dict

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import LRScheduler, Optimizer

from ..distributed.devices import check_device_setting
from ..models.adapters import peft_config
from ..models.loading import ModelSpec
from ..tracking.settings import check_tracking
from .batches import micro_batch_size_for
from .callbacks import check_callbacks
from .generative import check_val_metric
from .optimizers import check_schedule, named_lazy

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
    check_val_metric(kwargs)  # and that the tasks are all of one kind
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
    return kwargs
