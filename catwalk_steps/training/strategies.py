"""How the workers hold the model: DDP (a full replica each) or FSDP (torch's ``fully_shard``:
parameters, gradients and optimizer state sharded over the workers, for models that do not fit
one device). Checkpoints are name-keyed and resharded on load (:mod:`.checkpoints`), so a run may
be resumed with the other strategy or another device count.
"""

from contextlib import contextmanager, nullcontext
from typing import ContextManager, Dict, Iterator, Optional, Tuple

import torch
from peft import PeftModel, get_peft_model_state_dict
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.output_layer import output_layer
from ..models.rank_classification import RankClassificationModel
from ..models.weights import load_own_shards


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


@contextmanager
def whole_on_every_worker(model: torch.nn.Module) -> Iterator[None]:
    """Under FSDP, every worker holds the whole model while inside (its parameters gathered once,
    kept through forward passes, resharded on leaving), so that the workers may run forward passes
    of their own, as many as each needs: the eval tasks' scoring and generation
    (:mod:`.downstream`). It costs the whole model's memory on each worker meanwhile. Nothing
    under DDP or on one worker."""
    units = [module for module in model.modules() if isinstance(module, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:  # fully_shard's default again: the root keeps its parameters after forward
            unit.reshard()
            unit.set_reshard_after_forward(unit is not model, recurse=False)


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


def placed_model(job, world_size: int, device: torch.device) -> Tuple[RankClassificationModel, torch.nn.Module]:
    """``job``'s model on ``device``, and the module that trains it (see :func:`distribute`):
    under FSDP each worker reads its own shards alone (:func:`sharded_model`), else every worker
    loads the whole model."""
    model = sharded_model(job, world_size, device)
    if model is not None:
        return model, model
    model = job.build_model()
    return model, distribute(model.to(device), job.strategy, world_size)


def sharded_model(job, world_size: int, device: torch.device) -> Optional[RankClassificationModel]:
    """Under FSDP, the model built on the meta device, sharded, and each worker's shards alone read
    from the pretrained safetensors files (:func:`..models.weights.load_own_shards`): no worker
    holds the whole model. ``None`` where that does not apply (DDP, one worker, an adapter, a
    model without safetensors files naming its parameters): the caller loads the model whole,
    once per worker."""
    if job.strategy != "fsdp" or world_size == 1 or job.adapter is not None:
        return None

    def build_and_shard(lm) -> RankClassificationModel:
        model = job.build_model(lm=lm)
        # Whether its logits are its output layer on its hidden states, by its config: comparing
        # both ways would need the whole weights on every worker.
        output_layer(model.lm, compare_logits=False)
        distribute(model, "fsdp", world_size)
        return model

    return load_own_shards(job.spec, build_and_shard, device)
