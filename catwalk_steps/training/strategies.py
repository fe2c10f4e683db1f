"""How the workers hold the model: DDP (a full replica each) or FSDP (torch's ``fully_shard``:
parameters, gradients and optimizer state sharded over the workers, for models that do not fit
one device). Checkpoints hold the same full, CPU, name-keyed state under both, so a run may be
resumed with the other strategy or another device count.
"""

from contextlib import nullcontext
from typing import Any, ContextManager, Dict

import torch
from peft import PeftModel, get_peft_model_state_dict
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.rank_classification import RankClassificationModel

_FULL_ON_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)


def distribute(model: RankClassificationModel, strategy: str, world_size: int) -> torch.nn.Module:
    """The module to train: ``model`` itself on one worker; a DDP wrapper; or, under FSDP,
    ``model`` sharded in place, each transformer block (the model's ``_no_split_modules``) a
    unit of its own, so that one block's parameters are gathered at a time."""
    if world_size == 1:
        return model
    if strategy == "ddp":
        return DistributedDataParallel(model)
    blocks = set(getattr(model.lm, "_no_split_modules", None) or [])
    for module in model.lm.modules():
        if type(module).__name__ in blocks:
            fully_shard(module)
    return fully_shard(model)


def gradient_sync(trained: torch.nn.Module, enabled: bool) -> ContextManager:
    """Skips the gradient all-reduce (DDP) or reduce-scatter (FSDP) of a micro-batch that is not
    the step's last: the last one's backward pass reduces the accumulated gradients."""
    if isinstance(trained, DistributedDataParallel):
        return nullcontext() if enabled else trained.no_sync()
    if hasattr(trained, "set_requires_gradient_sync"):  # an FSDP module
        trained.set_requires_gradient_sync(enabled)
    return nullcontext()


def trained_weights(model: RankClassificationModel) -> Dict[str, torch.Tensor]:
    """Full CPU copies of the weights that train (an adapter's alone), on rank 0; empty on the
    other ranks. Every rank must call it: under FSDP it gathers the shards."""
    adapter = isinstance(model.lm, PeftModel)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=adapter)
    weights = get_model_state_dict(model.lm, options=options)
    if adapter:
        return get_peft_model_state_dict(model.lm, state_dict=weights) if weights else {}
    for names in model.tied_names:  # gathered apart; stored once
        if names[0] in weights:
            weights.update({name: weights[names[0]] for name in names[1:]})
    return weights


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
    """The optimizer's full state, keyed by parameter names, on rank 0 (every rank must call)."""
    return get_optimizer_state_dict(model, optimizer, options=_FULL_ON_RANK0)


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Dict[str, Any]) -> None:
    """Loads a state from :func:`optimizer_state`, whatever the strategy or world size it came from."""
    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
