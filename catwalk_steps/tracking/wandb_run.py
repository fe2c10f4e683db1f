"""A W&B run that never fails the work it watches.

``wandb.init`` against a server that does not answer retries for minutes (and then blocks the
process's exit too), and a crashed ``wandb-core`` service makes every later call raise. So:

- in online mode the server is first asked for anything at all, briefly; no answer, or an
  ``init`` that fails (not logged in, a refused run), and the run is opened in offline mode:
  one warning line, nothing logged is lost (``wandb sync`` uploads it later);
- ``init`` is bounded: few, short GraphQL retries, and ``init_timeout``; all waiting on W&B
  stays within :data:`WAIT_BUDGET` seconds;
- a call that raises later (the service crashed) reopens the run offline, once; if that fails
  too, W&B is left alone for the rest of the run, with one warning.

``WANDB_MODE`` (``online``, ``offline``, ``disabled``) is honoured; ``disabled`` opens nothing.
"""

import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from .settings import RunIdentity, WandbSettings

logger = logging.getLogger(__name__)

# wandb 0.26's error reporting reads a setting that wandb itself deprecated, warning on every run.
warnings.filterwarnings("ignore", message="Read the `app_url` setting", category=DeprecationWarning)

#: Seconds a run may spend waiting for W&B in all (the server's first answer, ``init``).
WAIT_BUDGET = 30.0
#: Seconds to wait for the server's first answer.
PROBE_TIMEOUT = 5.0
OFFLINE, DISABLED = "offline", "disabled"


def wandb_mode() -> str:
    """``WANDB_MODE`` (or ``WANDB_DISABLED``), else what ``wandb online/offline`` saved. Read each
    time: ``wandb`` itself reads the environment once per process."""
    import wandb

    if os.environ.get("WANDB_DISABLED", "").lower() in ("true", "1", "yes"):
        return DISABLED
    mode = os.environ.get("WANDB_MODE") or wandb.setup().settings.mode
    return {"dryrun": OFFLINE, "run": "online"}.get(mode, mode)


def server_unreachable(base_url: str, timeout: float) -> Optional[str]:
    """Why the W&B server at ``base_url`` gives no answer at all, or None if it answers (any
    HTTP status will do: this asks only whether anyone is there)."""
    import requests  # a dependency of wandb

    try:
        requests.head(base_url, timeout=timeout, allow_redirects=False)
    except requests.RequestException as e:
        return f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return None


class WandbRun:
    """One W&B run of a tracked job, opened with :meth:`open`; every method swallows W&B's
    failures (see the module's docstring)."""

    def __init__(self, settings: WandbSettings, identity: RunIdentity) -> None:
        self.settings = settings
        self.identity = identity
        self.run: Any = None
        self.deadline = 0.0
        self.reopened = False

    def _seconds_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def _init(self, mode: str) -> Any:
        import wandb

        directory = None if os.environ.get("WANDB_DIR") else self.identity.directory
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        return wandb.init(
            project=self.settings.project, entity=self.settings.entity, group=self.settings.group,
            tags=list(self.settings.tags) or None, name=self.identity.name, id=self.identity.run_id,
            config=self.identity.config, dir=directory, mode=mode,
            # Offline runs cannot look a run up to resume it (and wandb warns that it ignores it).
            resume=None if mode == OFFLINE else "allow",
            reinit="create_new",  # leaves any other run of this process alone
            settings=wandb.Settings(
                silent=True, **({} if mode == OFFLINE else {"init_timeout": max(self._seconds_left(), 1.0)}),
                # Experimental settings of wandb-core: a few short GraphQL tries, not minutes of them.
                x_graphql_retry_max=1, x_graphql_retry_wait_max_seconds=2, x_graphql_timeout_seconds=5,
            ),
        )

    def _fall_back_offline(self, reason: str) -> None:
        import wandb

        try:
            wandb.teardown()  # the failed attempt's stream keeps the run id otherwise
        except Exception:  # a crashed service raises here too
            pass
        try:
            self.run = self._init(OFFLINE)
        except Exception as e:
            self.run = None
            logger.warning("W&B: %s, and offline mode failed too (%s); not logging to W&B", reason, e)
            return
        logger.warning("W&B: %s; logging offline to %s (upload it with `wandb sync %s`)",
                       reason, self.run.dir, Path(self.run.dir).parent)

    def open(self) -> None:
        """Opens the run (offline when the server cannot be had), or nothing when disabled."""
        self.deadline = time.monotonic() + WAIT_BUDGET
        mode = wandb_mode()
        if mode == DISABLED:
            return
        if mode != OFFLINE:
            import wandb

            base_url = os.environ.get("WANDB_BASE_URL") or wandb.setup().settings.base_url
            why = server_unreachable(base_url, PROBE_TIMEOUT)
            if why is not None:
                self._fall_back_offline(f"no answer from {base_url} ({why})")
                return
        try:
            self.run = self._init(mode)
        except Exception as e:
            self._fall_back_offline(f"could not start the run ({type(e).__name__}: {str(e).splitlines()[0][:200]})")

    def _call(self, action: Callable[[Any], None]) -> None:
        """``action(run)``; on failure (the service died) the run is reopened offline, once."""
        if self.run is None:
            return
        try:
            action(self.run)
        except Exception as e:
            if self.reopened:
                self.run = None
                logger.warning("W&B failed again (%s); not logging to W&B", e)
                return
            self.reopened = True
            self._fall_back_offline(f"the run failed ({type(e).__name__}: {e})")
            self._call(action)

    def log(self, values: Dict[str, Any], step: Optional[int] = None) -> None:
        self._call(lambda run: run.log(values, step=step))

    def summarize(self, values: Dict[str, Any]) -> None:
        self._call(lambda run: run.summary.update(values))

    def finish(self, failed: bool = False) -> None:
        if self.run is not None:
            try:
                self.run.finish(exit_code=1 if failed else 0)
            except Exception as e:
                logger.warning("W&B: the run did not finish cleanly (%s)", e)
            self.run = None
