"""From ``catwalk::finetune``'s settings (:class:`.settings.FinetuneSettings`) to a
:class:`~.loop.TrainingJob`: the tasks' splits read (a bad data file fails here, before the
tokenizer or any model is loaded), tokenised for the task kind's loss, and cut into the batch plan
that every worker follows."""

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError
from tango.workspace import Workspace

from ..models.chat_templates import template_renderer
from ..models.loading import context_window
from ..models.prompt_room import generation_requests
from ..tasks import MCInstance
from ..tasks.chat import ChatFormat
from ..tracking.settings import Tracking
from .batches import BatchPlan, micro_batch_size_for
from .chat_rows import LearntTokens, check_generation_markers, row_tokens
from .generative import GENERATIVE, answer_examples, generated_metric, selected_record_key, task_metric, training_kind
from .loop import TrainingJob
from .packing import packed_examples
from .settings import FinetuneSettings

if TYPE_CHECKING:
    from ..models.conventions import TokenConventions


def tokenized_examples(conventions: "TokenConventions", instances: List[MCInstance], desc: str) -> List[Dict[str, Any]]:
    """Multiple-choice instances as the rank-classification loss takes them: each choice's
    (context, continuation) token ids, encoded as scoring encodes them, its answer's characters
    (what ``acc_norm`` divides by) and the gold choice."""
    return [
        {
            "queries": [
                (list(query.context), list(query.continuation))
                for query in (conventions.pair(context, c) for context, c in instance.pairs())
            ],
            "num_chars": instance.answer_lengths(),
            "label": instance.label,
        }
        for instance in Tqdm.tqdm(instances, desc=desc)
    ]


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
    kind = training_kind(tasks)
    generative = kind == GENERATIVE
    learnt = LearntTokens(s.completion_only_loss, s.assistant_only_loss)

    def chat_rows(instance: Any) -> Tuple[List[int], List[bool]]:
        return row_tokens(instance, conventions, render, s.apply_chat_template, learnt)

    def examples(split: Optional[str], per_task: Optional[List[List[Any]]]) -> Optional[List[Dict[str, Any]]]:
        if per_task is None:
            return None
        desc = f"Tokenizing {split}"
        if generative:
            return answer_examples(conventions, per_task, max_length, desc=desc, chat_rows=chat_rows)
        return tokenized_examples(conventions, [i for part in per_task for i in part], desc=desc)

    if generative and s.val_metric == "exact_match" and validation_instances:  # its budget, checked before training
        generation_requests(conventions, [i for part in validation_instances for i in part], max_length)
    train = examples(s.train_split, train_instances)
    if s.packing:
        if conventions.encoder_decoder:
            raise ConfigurationError("packing: an encoder-decoder reads each row's prompt apart; train it unpacked")
        train = packed_examples(train, max_length)
    plan = BatchPlan(len(train), s.batch_size, micro_batch_size, s.seed)
    if plan.steps_per_epoch == 0:
        raise ConfigurationError(f"{len(train)} training instances make no batch of {s.batch_size}")
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
        generative=generative,
        selected=selected_record_key(kind, s.val_metric),
        tasks=tasks if generated_metric(kind, s.val_metric) else None,
        task_metrics=[task_metric(t, s.val_metric) for t in tasks] if generated_metric(kind, s.val_metric) else None,
        workspace=workspace,
        step_id=step_id,
        step_name=step_name,
        tracking=tracking,
    )
