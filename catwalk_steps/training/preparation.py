"""From ``catwalk::finetune``'s settings (:class:`.settings.FinetuneSettings`) to a
:class:`~.loop.TrainingJob`: the tasks' splits read (a bad data file fails here, before the
tokenizer or any model is loaded), made the task kind's training examples (its
:class:`~catwalk_steps.kinds.TrainingObjective`), and cut into the batch plan
that every worker follows."""

import math
from pathlib import Path
from typing import Any, List, Optional, Sequence

from tango.common.exceptions import ConfigurationError
from tango.workspace import Workspace

from ..models.answer_rows import AnswerRow, answer_row
from ..models.chat_templates import template_renderer
from ..models.loading import context_window
from ..models.packing import packed
from ..models.prompt_room import generation_requests
from ..tasks.chat import ChatFormat
from ..tracking.settings import Tracking
from .batches import BatchPlan, micro_batch_size_for
from .chat_rows import LearntTokens, check_generation_markers, check_learnt_tokens_apply, row_tokens
from .downstream import downstream_tasks
from .eval_tasks import eval_entries, is_eval_metric
from .loop import TrainingJob
from .settings import FinetuneSettings
from .trained_kind import objective, trained_kind


def training_job(
    settings: FinetuneSettings,
    *,
    work_dir: Path,
    workspace: Workspace,
    step_id: str,
    step_name: str,
    tracking: Optional[Tracking],
) -> TrainingJob:
    """The job ``settings`` describe."""
    s, spec = settings, settings.model_spec()
    tasks: Sequence[Any] = s.tasks
    micro_batch_size = micro_batch_size_for(s.batch_size, s.micro_batch_size, s.workers)

    chat = s.apply_chat_template is not False
    conventions = spec.conventions() if chat else None  # the template turns rows into prompts
    render = template_renderer(conventions.tokenizer, s.apply_chat_template, spec.pretrained, strict=True) if chat else None
    if s.assistant_only_loss:
        check_generation_markers(conventions.tokenizer, s.apply_chat_template, spec.pretrained)
    settings = {"chat": ChatFormat(render)} if chat else {}

    def instances(split: Optional[str], limit: Optional[int]) -> Optional[List[List[Any]]]:
        return None if split is None else [task.instances(split, limit, **settings) for task in tasks]

    # Both splits are read (a bad data file reported) before any model is loaded (without a chat
    # template, before the tokenizer too).
    train_instances = instances(s.train_split, s.train_limit)
    validation_instances = instances(s.validation_split, s.validation_limit)
    conventions, config = conventions or spec.conventions(), spec.load_config()
    max_length = context_window(config)
    kind = trained_kind(tasks)
    training = objective(kind)
    # The validation split's number that chooses, if it is not an eval task's (:mod:`.eval_tasks`).
    own_metric = None if is_eval_metric(s.val_metric) else s.val_metric
    learnt = LearntTokens(s.completion_only_loss, s.assistant_only_loss)
    if training.learns_sequences:
        rows = [row for split in (train_instances or [], validation_instances or []) for part in split for row in part]
        check_learnt_tokens_apply(learnt, rows, conventions.encoder_decoder)

    def chat_example(instance: Any, task: int) -> Optional[AnswerRow]:
        """A chat row, cut to the window keeping its start (TRL's ``truncation_mode="keep_start"``)."""
        ids, mask = row_tokens(instance, conventions, render, s.apply_chat_template, learnt)
        return answer_row(ids, mask, max_length, keep_start=True, instance=instance, task=task)

    def examples(split: Optional[str], per_task: Optional[List[List[Any]]]) -> Optional[List[Any]]:
        if per_task is None:
            return None
        return training.examples(conventions, per_task, max_length, f"Tokenizing {split}", chat_example)

    eval_tasks = downstream_tasks(eval_entries(s.eval_tasks), spec, config) if s.eval_tasks else None
    if training.generates(own_metric) and validation_instances:  # the generations' budget, checked before training
        generation_requests(conventions, [i for part in validation_instances for i in part], max_length)
    train = examples(s.train_split, train_instances)
    if s.packing:
        if conventions.encoder_decoder:
            raise ConfigurationError("packing: an encoder-decoder reads each row's prompt apart; train it unpacked")
        train = packed(train, max_length)
    plan = BatchPlan(len(train), s.batch_size, micro_batch_size, s.seed, keep_partial=s.packing)
    if plan.steps_per_epoch == 0:
        raise ConfigurationError(f"{len(train)} training {'packs' if s.packing else 'instances'} make no batch of "
                                 f"{s.batch_size}")
    train_steps = plan.steps_per_epoch * s.train_epochs
    return TrainingJob(
        spec=spec,
        train=train,
        validation=examples(s.validation_split, validation_instances),
        plan=plan,
        train_steps=train_steps,
        validate_every=s.validate_every or plan.steps_per_epoch,
        learning_rate=s.learning_rate,
        weight_decay=s.weight_decay,
        warmup_steps=math.ceil(s.warmup_fraction * train_steps),
        max_grad_norm=s.max_grad_norm,
        pad_token_id=conventions.pad_token_id,
        max_length=max_length,
        work_dir=work_dir,
        log_every=s.log_every,
        adapter=s.adapter,
        strategy=s.strategy,
        precision=s.precision,
        gradient_checkpointing=s.gradient_checkpointing,
        shared_context=s.shared_context,
        callbacks=s.callbacks,
        optimizer=s.optimizer,
        lr_scheduler=s.lr_scheduler,
        decay_biases_and_norms=s.decay_biases_and_norms,
        patience=s.patience,
        kind=kind.name,
        selected=s.val_metric if is_eval_metric(s.val_metric) else training.record_key(s.val_metric),
        tasks=tasks if training.generates(own_metric) else None,
        task_metrics=training.task_metrics(own_metric, tasks),
        eval_tasks=eval_tasks,
        workspace=workspace,
        step_id=step_id,
        step_name=step_name,
        tracking=tracking,
    )
