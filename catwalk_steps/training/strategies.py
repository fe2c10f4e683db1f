"""How the workers hold the model: DDP (a full replica each) or FSDP (torch's ``fully_shard``:
parameters, gradients and optimizer state sharded over the workers, for models that do not fit
one device). Checkpoints are name-keyed and resharded on load (:mod:`.checkpoints`), so a run may
be resumed with the other strategy or another device count.
"""

from contextlib import nullcontext
from pathlib import Path
from typing import ContextManager, Dict, List, Optional

import torch
import torch.distributed.checkpoint as dcp
from peft import PeftModel, get_peft_model_state_dict
from safetensors import safe_open
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.loading import ModelSpec, local_directory
from ..models.output_layer import output_layer
from ..models.rank_classification import RankClassificationModel
from ..models.streaming import empty_model, safetensors_files, tied_parameter_names


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


def sharded_model(job, world_size: int, device: torch.device) -> Optional[RankClassificationModel]:
    """Under FSDP, the model built on the meta device, sharded, and each worker's shards alone read
    from the pretrained safetensors files (``torch.distributed.checkpoint``'s Hugging Face reader):
    no worker holds the whole model. ``None`` where that does not apply (DDP, one worker, an
    adapter, a model without safetensors files whose names match its parameters): the caller
    loads the model whole, once per worker."""
    if job.strategy != "fsdp" or world_size == 1 or job.adapter is not None:
        return None
    directory = pretrained_safetensors(job.spec)
    if directory is None:
        return None
    config = job.spec.load_config()
    lm = empty_model(config, torch.float32)
    lm.tie_weights()  # on the meta device too: tied names then share one parameter, sharded once
    names = {name for path in safetensors_files(directory) for name in _tensor_names(path)}
    tied = {name for names in tied_parameter_names(lm) for name in names[1:]}
    expected = {name for name, _ in lm.named_parameters()}
    if expected - tied - names:
        return None  # the files name the weights otherwise (renamed in this transformers version)
    model = job.build_model(lm=lm)
    # Whether its logits are its output layer on its hidden states, by its config: comparing
    # both ways would need the whole weights on every worker.
    output_layer(model.lm, compare_logits=False)
    distribute(model, "fsdp", world_size)
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}  # real, and kept
    model.to_empty(device=device)
    for name, buffer in model.named_buffers():
        buffer.copy_(buffers[name])
    state = get_model_state_dict(model.lm)
    dcp.load({k: v for k, v in state.items() if k not in tied}, storage_reader=dcp.HuggingFaceStorageReader(str(directory)))
    set_model_state_dict(model.lm, state)
    return model


def _tensor_names(path: Path) -> List[str]:
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def pretrained_safetensors(spec: ModelSpec) -> Optional[Path]:
    """The directory of ``spec``'s pretrained safetensors files: a local one, or the hub's files
    fetched into the local hub cache."""
    directory = local_directory(spec.pretrained)
    if directory is None:
        from huggingface_hub import snapshot_download

        try:
            directory = Path(snapshot_download(spec.pretrained, revision=spec.revision,
                                               allow_patterns=["*.safetensors", "*.json"]))
        except Exception:  # noqa: BLE001 (any hub failure: the whole-model path says it properly)
            return None
    return directory if safetensors_files(directory) else None
