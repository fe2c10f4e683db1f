"""``eval_tasks`` on ``catwalk::finetune``: the downstream tasks scored at every validation, as
the setting reads (:class:`EvalTask`), its checks when the step graph is built, and how a
validation record holds their numbers (``record["eval"][TASK][METRIC]``) and how
``val_metric: "eval/TASK/METRIC"`` picks one of them. The scoring itself, on the workers, is
:mod:`.downstream`'s."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

from tango import Step
from tango.common import FromParams
from tango.common.det_hash import CustomDetHash
from tango.common.exceptions import ConfigurationError

from ..kinds import conversational_kinds, kind_of_task
from ..reports.accuracy import RANKINGS
from ..reports.olmes import OLMES_NAMES
from ..tasks import Task
from ..tasks.base import check_limit, check_prompts, check_split
from ..tasks.chat import check_chat_settings
from ..tracking.training import EVAL  # also the prefix of a val_metric naming an eval task's number

#: The metrics a ``val_metric`` may name, by request kind (a generative task's are its own,
#: ``Task.METRICS``). Those listed under :data:`LOWER_IS_BETTER` are best when lowest.
SELECTABLE = {
    "multiple_choice": (*RANKINGS, "ece", "brier"),
    "loglikelihood_rolling": ("word_perplexity", "byte_perplexity", "bits_per_byte", "token_perplexity"),
    "loglikelihood": ("acc", "perplexity"),
}
LOWER_IS_BETTER = {"ece", "brier", "word_perplexity", "byte_perplexity", "bits_per_byte", "token_perplexity",
                   "perplexity"}


class EvalTask(FromParams, CustomDetHash):
    """One entry of ``eval_tasks``: a task as ``catwalk::predict`` takes it, and the predict
    settings it is scored with. A plain task (``{type: "piqa", ...}``) is an entry with the
    defaults; ``{task: {type: "piqa", ...}, split: "validation", limit: 200, name: "piqa_200"}``
    sets them. (Few-shot prompts are the task's own setting, ``num_shots``.)

    :param name: what the numbers are filed under (``eval/NAME/acc``); by default the task's
        registered name (``piqa``). Two entries of one name must be told apart by it.
    :param split: the split scored, as ``catwalk::predict``'s.
    :param limit: its first ``limit`` instances only.
    :param unconditioned: also score choices after the task's unconditioned context
        (``acc_uncond``), as ``catwalk::predict``'s.
    """

    def __init__(self, task: Task, name: Optional[str] = None, split: str = "validation", limit: Optional[int] = None,
                 unconditioned: bool = False) -> None:
        self.task = task
        self.name = name or registered_name(task)
        self.split = split
        self.limit = limit
        self.unconditioned = unconditioned

    def det_hash_object(self) -> Any:
        return (self.task, self.name, self.split, self.limit, self.unconditioned)


def registered_name(task: Task) -> str:
    """The name ``task``'s class is registered under (its tables' name), else the class's name."""
    return next((name for name in Task.list_available() if Task.resolve_class_name(name)[0] is type(task)),
                type(task).__name__)


def eval_entries(eval_tasks: Optional[Sequence[Any]]) -> List[EvalTask]:
    """The setting's entries, a plain task as an :class:`EvalTask` of its defaults."""
    return [entry if isinstance(entry, EvalTask) else EvalTask(entry) for entry in eval_tasks or []]


def is_eval_metric(val_metric: Optional[str]) -> bool:
    return val_metric is not None and val_metric.startswith(EVAL + "/")


def _named(val_metric: str) -> Tuple[str, str]:
    """(TASK, METRIC) of ``eval/TASK/METRIC`` (a metric's own ``/``, as lm_eval filters have, kept)."""
    _, task, metric = val_metric.split("/", 2)
    return task, metric


def measured(validation: Dict[str, Any], selected: str) -> float:
    """The number ``selected`` of a validation record (``val_acc``, or ``eval/TASK/METRIC``)."""
    if is_eval_metric(selected):
        task, metric = _named(selected)
        return validation[EVAL][task][metric]
    return validation[selected]


def higher_is_better(selected: str) -> bool:
    return not (selected == "val_loss" or (is_eval_metric(selected) and _named(selected)[1] in LOWER_IS_BETTER))


def check_eval_tasks(kwargs: Dict[str, Any]) -> None:
    """Refuses, when the step graph is built, eval tasks that cannot be scored (a kind no request
    kind answers, a missing split, a chat task's rows without a template, two of one name) and a
    ``val_metric`` no eval task measures."""
    entries = eval_entries(kwargs.get("eval_tasks"))
    val_metric = kwargs.get("val_metric")
    if not entries:
        if is_eval_metric(val_metric):
            raise ConfigurationError(f"val_metric {val_metric!r} names an eval task, but eval_tasks is empty")
        return
    if kwargs.get("validation_split", "validation") is None:
        raise ConfigurationError("eval_tasks are scored at each validation, which needs a validation_split")
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigurationError(f"eval_tasks: two entries are named {', '.join(twice)}: give each a name")
    template = kwargs.get("apply_chat_template", False)  # the result's: catwalk::predict scores under it too
    for entry in entries:
        if isinstance(entry.task, Step):
            continue  # (a task another step makes: checked when it is scored)
        kind_of_task(entry.task)
        check_split(f"eval_tasks ({entry.name})", entry.task, entry.split)
        check_limit(f"eval_tasks ({entry.name}) limit", entry.limit)
        check_prompts(entry.task, entry.split, template is not False)
        check_chat_settings({"apply_chat_template": template, "unconditioned": entry.unconditioned}, [entry.task],
                            conversational_kinds())
    if is_eval_metric(val_metric):
        _check_measured(val_metric, {entry.name: entry.task for entry in entries})


def _check_measured(val_metric: str, tasks: Dict[str, Any]) -> None:
    if val_metric.count("/") < 2:
        raise ConfigurationError(f"val_metric {val_metric!r}: name an eval task's metric as eval/TASK/METRIC")
    name, metric = _named(val_metric)
    if name not in tasks:
        raise ConfigurationError(f"val_metric {val_metric!r}: no eval task is named {name!r} (eval_tasks: "
                                 f"{', '.join(tasks)})")
    task = tasks[name]
    if isinstance(task, Step):
        return
    # A generative task's metrics are its own (``exact_match/strict-match``, ...); a task that names a
    # primary metric (OLMES's) also reports OLMES's names and its primary score.
    generative = task.REQUEST_TYPE == "generate_until"
    selectable = getattr(task, "METRICS", ()) if generative else SELECTABLE.get(task.REQUEST_TYPE, ())
    if getattr(task, "primary_metric", None) is not None:
        selectable = (*selectable, *OLMES_NAMES, "primary_score")
    if metric not in selectable:
        raise ConfigurationError(f"val_metric {val_metric!r}: the {name} task's metrics that can choose are "
                                 f"{', '.join(selectable)}")
