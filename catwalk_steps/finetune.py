"""``catwalk::finetune``: rank-classification fine-tuning with Tango's torch trainer."""

import math
import os
import socket
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from tango import Step
from tango.common import DatasetDict, Tqdm
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import DataLoader, TorchTrainingEngine, TorchTrainStep, TrainCallback
from tango.step import StepResources
from transformers import get_linear_schedule_with_warmup

from .models.loading import ModelSpec, context_window
from .models.rank_classification import RankClassificationCollator, RankClassificationModel
from .models.scoring import encode_pair
from .sharding import GlobalOrderSampler, PaddedDataset, PaddedShardSampler
from .tasks import MCInstance, MultipleChoiceTask
from .weights import FinetunedModel, FinetunedModelFormat


class _TrainingEngine(TorchTrainingEngine):
    """Tango's torch engine, with two changes for DDP workers.

    CPU threads are shared out between workers on one machine (by default each takes every
    core, and 2 workers on 2 cores run ~40% slower). And each rank draws its own dropout masks:
    Tango seeds every worker alike, which would repeat the same masks on every rank.
    """

    def __init__(self, train_config, model, optimizer, **kwargs) -> None:
        if train_config.is_distributed and train_config.device_type == "cpu":
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // train_config.world_size))
        super().__init__(train_config, model, optimizer, **kwargs)
        torch.manual_seed(train_config.seed + train_config.worker_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def training_devices(device: str, device_count: int) -> List[int]:
    """Tango's device list (CUDA ids, or -1 per CPU worker), failing loudly where Tango would
    quietly fall back to the CPU."""
    if device_count < 1:
        raise ConfigurationError(f"device_count must be at least 1, got {device_count}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        available = torch.cuda.device_count()
        if device_count > available:
            raise ConfigurationError(f"device_count={device_count}, but only {available} CUDA devices are present")
        return list(range(device_count))
    if device == "cpu":
        cores = os.cpu_count() or 1
        if device_count > cores:
            raise ConfigurationError(f"device_count={device_count} CPU workers, but only {cores} cores are present")
        return [-1] * device_count
    raise ConfigurationError(f"device must be 'auto', 'cuda' or 'cpu', got {device!r}")


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


@Step.register("catwalk::finetune")
class FinetuneStep(TorchTrainStep):
    """Fine-tunes a causal LM as a rank classifier on the train splits of one or more tasks.

    The loss is the cross-entropy over each instance's choices, scored by summed log-likelihood;
    validation loss and accuracy are computed in the model's ``forward()``.

    ``batch_size`` is the global batch, split over ``device_count`` DDP workers and
    ``grad_accum`` micro-batches, and every step sees the same examples for any device count
    (see :mod:`catwalk_steps.sharding`). So ``device_count`` does not change the result, and it,
    the device, the port and the logging interval are not part of the cache key.

    The result is a :class:`FinetunedModel`: CPU weights, cached as safetensors.
    """

    VERSION = "cw1"
    FORMAT = FinetunedModelFormat()
    SKIP_ID_ARGUMENTS = {"device_count", "device", "distributed_port", "log_every", "callbacks"}
    METADATA = {"artifact_kind": "model"}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        for name in ("batch_size", "grad_accum", "train_epochs"):
            if kwargs.get(name, 1) < 1:
                raise ConfigurationError(f"{name} must be at least 1, got {kwargs[name]}")
        if kwargs.get("learning_rate", 1.0) <= 0:
            raise ConfigurationError(f"learning_rate must be positive, got {kwargs['learning_rate']}")
        device_count, grad_accum = kwargs.get("device_count", 1), kwargs.get("grad_accum", 1)
        training_devices(kwargs.get("device", "auto"), device_count)
        batch_size = kwargs.get("batch_size", 32)
        if batch_size % (device_count * grad_accum):
            raise ConfigurationError(
                f"batch_size={batch_size} must be divisible by device_count*grad_accum={device_count * grad_accum}"
            )
        ModelSpec.parse(kwargs.get("model", ""))
        return kwargs

    @property
    def resources(self) -> StepResources:
        uses_cuda = self.kwargs.get("device", "auto") == "cuda" or (
            self.kwargs.get("device", "auto") == "auto" and torch.cuda.is_available()
        )
        return self.step_resources or StepResources(gpu_count=self.kwargs.get("device_count", 1) if uses_cuda else 0)

    def run(  # type: ignore[override]
        self,
        model: str,
        tasks: List[MultipleChoiceTask],
        *,
        tokenizer: Optional[str] = None,
        config_overrides: Optional[Dict[str, Any]] = None,
        batch_size: int = 32,
        grad_accum: int = 1,
        train_epochs: int = 1,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.0,
        warmup_fraction: float = 0.1,
        max_grad_norm: Optional[float] = 1.0,
        seed: int = 42,
        train_split: str = "train",
        validation_split: Optional[str] = "validation",
        train_limit: Optional[int] = None,
        validation_limit: Optional[int] = None,
        validate_every: Optional[int] = None,
        device_count: int = 1,
        device: str = "auto",
        distributed_port: Optional[int] = None,
        log_every: int = 10,
        callbacks: Optional[List[Lazy[TrainCallback]]] = None,
    ) -> FinetunedModel:
        """
        :param model: ``rc::<hub name or local directory>`` of the model to start from.
        :param tasks: the tasks whose ``train_split`` (and ``validation_split``) to use.
        :param tokenizer: hub name or directory of the tokenizer, if not the model's.
        :param config_overrides: HF config values to change, e.g. dropouts set to 0.
        :param batch_size: instances per optimizer step, over all devices and micro-batches.
        :param validate_every: steps between validations (and checkpoints); by default, at the end
            of each epoch. The returned weights are from the validation with the best accuracy, or
            the last step without a ``validation_split``.
        :param device: ``"auto"`` (CUDA if present), ``"cuda"`` or ``"cpu"``.
        :param distributed_port: DDP port; by default a free one, so parallel steps do not collide.
        :param callbacks: Tango ``TrainCallback``s, e.g. ``{type: "wandb::log"}`` (with
            ``tango.integrations.wandb`` in ``include_package`` and ``wandb`` installed). They are
            not in the cache key, so they must only observe training, not change it.
        """
        devices = training_devices(device, device_count)
        spec = ModelSpec.parse(model, tokenizer=tokenizer, config_overrides=config_overrides or {})
        self.logger.info(
            "Training on %s with %d DDP worker%s", "cpu" if devices[0] < 0 else "cuda", device_count,
            "s" if device_count > 1 else "",
        )
        tok = spec.load_tokenizer()
        max_length = context_window(spec.load_config())

        def examples(split: str, limit: Optional[int]) -> List[Dict[str, Any]]:
            instances = [i for task in tasks for i in task.instances(split, limit)]
            return tokenized_examples(tok, instances, desc=f"Tokenizing {split}")

        splits = {"train": examples(train_split, train_limit)}
        if validation_split is not None:
            splits["validation"] = PaddedDataset(examples(validation_split, validation_limit))
        steps_per_epoch = len(splits["train"]) // batch_size
        if steps_per_epoch == 0:
            raise ConfigurationError(f"{len(splits['train'])} training instances make no batch of {batch_size}")
        train_steps = steps_per_epoch * train_epochs

        collator = RankClassificationCollator(tok.pad_token_id, max_length)
        micro_batch = batch_size // (device_count * grad_accum)
        optimizer = Lazy(partial(torch.optim.AdamW, lr=learning_rate, weight_decay=weight_decay))
        schedule = Lazy(
            partial(
                get_linear_schedule_with_warmup,
                num_warmup_steps=math.ceil(warmup_fraction * train_steps),
                num_training_steps=train_steps,
            )
        )
        engine = Lazy(partial(_TrainingEngine, optimizer=optimizer, lr_scheduler=schedule, max_grad_norm=max_grad_norm))
        trained = self._train(
            model=Lazy(partial(RankClassificationModel, spec)),
            training_engine=engine,
            dataset_dict=DatasetDict(splits=splits),
            train_dataloader=Lazy(
                partial(
                    DataLoader,
                    collate_fn=collator,
                    sampler=Lazy(partial(GlobalOrderSampler, seed=seed)),
                    batch_size=micro_batch,
                    drop_last=True,
                )
            ),
            validation_dataloader=Lazy(
                partial(DataLoader, collate_fn=collator, sampler=Lazy(PaddedShardSampler), batch_size=micro_batch)
            ),
            train_split="train",
            validation_split="validation" if validation_split is not None else None,
            seed=seed,
            train_steps=train_steps,
            grad_accum=grad_accum,
            log_every=log_every,
            checkpoint_every=validate_every or steps_per_epoch,
            validate_every=validate_every,
            devices=devices,
            distributed_port=distributed_port or _free_port(),
            val_metric_name="acc",
            minimize_val_metric=False,
            auto_aggregate_val_metric=False,
            callbacks=callbacks,
        )
        assert isinstance(trained, RankClassificationModel)
        state_dict = {name: tensor.detach().cpu() for name, tensor in trained.lm.state_dict().items()}
        return FinetunedModel(spec, state_dict, self._best_checkpoint_metrics())

    def _best_checkpoint_metrics(self) -> Dict[str, Any]:
        state = torch.load(Path(self.work_dir) / "checkpoint_state_best" / "worker0_trainer.pt")
        return {"step": state["training_steps"], "val_acc": state["val_acc"]}
