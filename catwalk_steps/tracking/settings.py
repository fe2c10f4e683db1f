"""What a step asks its trackers for, checked when the step graph is built, and what a run sends
them: its identity (stable across kills and resumes) and its configuration."""

import hashlib
import importlib.util
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tango import Step
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy

from ..tango_fixes.setting_types import list_expected

EXTRA = 'pip install "catwalk-steps[wandb]" (in a clone: pip install -e ".[wandb]")'
#: The W&B settings of a step, by the name of its argument.
WANDB_ARGUMENTS = ("wandb_project", "wandb_entity", "wandb_group", "wandb_tags", "wandb_name")
TRACKING_ARGUMENTS = WANDB_ARGUMENTS + ("tensorboard_dir",)


@dataclass(frozen=True)
class WandbSettings:
    """Where a W&B run goes: ``wandb.init``'s project, entity, group and tags (its name and id
    are the run's :class:`RunIdentity`)."""

    project: str
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: Tuple[str, ...] = ()


@dataclass
class RunIdentity:
    """One tracked run: its W&B id (derived from the step's unique id and its work dir, so a
    run killed and resumed in the same workspace, on any device count, continues the same W&B
    run, and two workspaces training the same step into one project do not mix their curves),
    its display name, and the directory W&B keeps its local files in (``WANDB_DIR`` wins)."""

    run_id: str
    name: str
    directory: Path
    config: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Tracking:
    """What a run reports to: W&B (``wandb``), TensorBoard (``tensorboard_dir``, this run's
    own folder), or both."""

    identity: RunIdentity
    wandb: Optional[WandbSettings] = None
    tensorboard_dir: Optional[Path] = None


def _check_installed(module: str, setting: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ConfigurationError(f"{setting} needs the `{module}` package, which is not installed: {EXTRA}")


def check_tracking(kwargs: Dict[str, Any]) -> None:
    """Fails when the step graph is built for W&B settings without a project, or for a tracker
    whose package is not installed."""
    if isinstance(kwargs.get("wandb_tags"), str):  # a step built in Python (a config's is refused by Tango)
        raise list_expected("wandb_tags", kwargs["wandb_tags"])
    if kwargs.get("wandb_project") is None:
        stray = [name for name in WANDB_ARGUMENTS[1:] if kwargs.get(name)]
        if stray:
            raise ConfigurationError(f"{', '.join(stray)} without wandb_project: set wandb_project to log to W&B")
    else:
        _check_installed("wandb", "wandb_project")
    if kwargs.get("tensorboard_dir") is not None:
        _check_installed("tensorboard", "tensorboard_dir")


def wandb_settings(
    project: Optional[str], entity: Optional[str], group: Optional[str], tags: Optional[List[str]],
) -> Optional[WandbSettings]:
    return None if project is None else WandbSettings(project, entity, group, tuple(tags or ()))


def tracking_of(
    step: Step, work_dir: Path, *, wandb_project: Optional[str] = None, wandb_entity: Optional[str] = None,
    wandb_group: Optional[str] = None, wandb_tags: Optional[List[str]] = None, wandb_name: Optional[str] = None,
    tensorboard_dir: Optional[str] = None,
) -> Optional[Tracking]:
    """The trackers a step's settings ask for, or None. A relative ``tensorboard_dir`` is
    relative to where ``tango run`` runs; the run writes into ``<step name>-<id>`` inside it."""
    wandb = wandb_settings(wandb_project, wandb_entity, wandb_group, wandb_tags)
    if wandb is None and tensorboard_dir is None:
        return None
    identity = run_identity(step, work_dir, wandb_name)
    board = None
    if tensorboard_dir is not None:
        folder = re.sub(r"[^A-Za-z0-9._-]+", "_", step.name)  # the step's name, as a folder name
        board = Path(tensorboard_dir).resolve() / f"{folder}-{step.unique_id.rsplit('-', 1)[-1][:8]}"
    return Tracking(identity, wandb, board)


def run_identity(step: Step, work_dir: Path, name: Optional[str] = None) -> RunIdentity:
    digest = hashlib.sha256(str(Path(work_dir).resolve()).encode()).hexdigest()[:8]
    return RunIdentity(
        run_id=f"{step.unique_id}-{digest}", name=name or step.name, directory=Path(work_dir),
        config={"step_id": step.unique_id, "step_name": step.name, **keyed_settings(step)},
    )


def keyed_settings(step: Step) -> Dict[str, Any]:
    """Every setting of ``step`` that is in its cache key (defaults included), as plain JSON
    values: what a run's curves should be grouped and filtered by."""
    defaults = {
        name: p.default for name, p in inspect.signature(type(step).run).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    settings = {**defaults, **step.kwargs}
    skipped = set(step.SKIP_ID_ARGUMENTS) | {
        name for name, default in step.SKIP_DEFAULT_ARGUMENTS.items() if settings.get(name, default) == default
    }
    return {name: plain(value) for name, value in settings.items() if name not in skipped}


def plain(value: Any) -> Any:
    """``value`` as JSON: a registrable given as ``Lazy`` as its config, a step as its name and
    id, a task (or any object) as its class and public attributes."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Step):
        return f"{value.name} ({value.unique_id})"
    if isinstance(value, Lazy):  # its config, as the key hashes it (read as training.optimizers does)
        return plain({**value._params.as_dict(quiet=True), **value._constructor_extras})
    if hasattr(value, "__dict__"):
        return {"class": type(value).__name__, **{k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}}
    return str(value)
