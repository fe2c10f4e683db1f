"""Why a model, tokenizer or dataset could not be fetched from the HF hub, in words: offline mode,
a hub that cannot be reached, or a name that does not exist there, and how to run offline.

transformers and datasets wrap the hub client's errors in their own (``OSError``,
``ConnectionError``, ``DatasetNotFoundError``), keeping the hub's as the cause; a hub that
cannot be reached shows no hub error type at all (huggingface-hub 1.x ends in the HTTP client's
"client has been closed"), so that case is told by trying to connect to the hub."""

import os
import socket
from typing import Iterator, Optional
from urllib.parse import urlparse

#: Seconds to wait for a TCP connection to the hub when telling why a download failed.
REACHABILITY_TIMEOUT = 5.0


def _chain(error: Optional[BaseException]) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _offline_mode() -> bool:
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or os.environ.get("HF_DATASETS_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable() -> bool:
    """Whether a TCP connection to the hub's endpoint (``HF_ENDPOINT``) opens."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=REACHABILITY_TIMEOUT).close()
        return True
    except OSError:
        return False


def hub_failure(
    what: str, name: str, error: BaseException, offline_way: str, repo_type: str = "model"
) -> Optional[str]:
    """A message for ``error``, raised while fetching ``what`` ``name`` (a hub repository of
    ``repo_type``) from the hub, when the cause was the hub (offline mode, unreachable, no such
    name); ``None`` for other failures. ``offline_way`` says how to give a local copy instead."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError,
    )

    causes = list(_chain(error))
    run_offline = (
        f"To run offline, {offline_way}, or set HF_HUB_OFFLINE=1 with an HF cache ({constants.HF_HOME}) that "
        f"holds it (fetched on a machine with network, e.g. `hf download {name} --repo-type {repo_type}`)"
    )
    # datasets re-raises its ConnectionError without the hub's OfflineModeIsEnabled behind it.
    not_at_hand = (OfflineModeIsEnabled, LocalEntryNotFoundError, ConnectionError)
    if _offline_mode() and any(isinstance(e, not_at_hand) for e in causes):
        return (
            f"Cannot load {what} {name!r}: offline mode is on (HF_HUB_OFFLINE) and it is not in the HF cache "
            f"({constants.HF_HOME}). {run_offline}"
        )
    revision_missing = any(isinstance(e, RevisionNotFoundError) for e in causes)
    if revision_missing or any(
        isinstance(e, RepositoryNotFoundError) or type(e).__name__ == "DatasetNotFoundError" for e in causes
    ):
        missing = "that revision of it does not" if revision_missing else "it does not"
        return (
            f"Cannot load {what} {name!r}: the hub ({constants.ENDPOINT}) was reached, but {missing} exist there "
            f"(or is private or gated: log in with `hf auth login`). Check the name, or for a local copy "
            f"{offline_way}: {error}"
        )
    if not hub_reachable():
        return (
            f"Cannot load {what} {name!r}: the HF hub ({constants.ENDPOINT}) could not be reached from this "
            f"machine (no network?), and it is not in the HF cache. {run_offline}"
        )
    return None
