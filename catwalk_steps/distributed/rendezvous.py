"""Where the nodes of a multi-node step meet: node 0 (the process running the step) publishes its
rendezvous endpoint in the step's work dir, on a filesystem every node sees; the other nodes
(``python -m catwalk_steps.join``) read it there. Any node may start first: a joining node waits
for the endpoint to appear, and node 0's agent waits for the others to arrive.
"""

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Optional

from ..storage.atomic import publish_text
from .launch import Nodes

ENDPOINT_FILE = "rendezvous.json"
#: Set to the address other nodes reach this one at, where the host name does not resolve to it.
HOST_VARIABLE = "CATWALK_RENDEZVOUS_HOST"


def this_host() -> str:
    return os.environ.get(HOST_VARIABLE) or socket.getfqdn()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def publish(work_dir: Path, count: int, port: Optional[int], join_timeout: int) -> Nodes:
    """Node 0's side: a fresh endpoint (``port``, or one free now) and run id, written for the
    other nodes to read."""
    nodes = Nodes(count, f"{this_host()}:{port or free_port()}", True, uuid.uuid4().hex, join_timeout)
    record = {"endpoint": nodes.endpoint, "run_id": nodes.run_id, "nodes": count, "published": time.time()}
    publish_text(work_dir / ENDPOINT_FILE, json.dumps(record))
    return nodes


def withdraw(work_dir: Path, nodes: Nodes) -> None:
    """Node 0's side, when its launch is over: the endpoint is no longer served."""
    path = work_dir / ENDPOINT_FILE
    try:
        if json.loads(path.read_text())["run_id"] == nodes.run_id:
            path.unlink()
    except (OSError, ValueError, KeyError):
        pass


def wait_for_endpoint(work_dir: Path, timeout: float, not_run: Optional[str] = None) -> Nodes:
    """A joining node's side: the endpoint node 0 published (other than run ``not_run``, one
    already tried), waiting up to ``timeout`` seconds for it to appear."""
    path, deadline = work_dir / ENDPOINT_FILE, time.monotonic() + timeout
    while True:
        try:
            record = json.loads(path.read_text())
            if record["run_id"] != not_run:
                return Nodes(record["nodes"], record["endpoint"], False, record["run_id"], int(timeout))
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"No node 0 published a rendezvous endpoint in {path} within {timeout:.0f} s: start "
                "`tango run` for this config and workspace (node 0), or raise --timeout"
            )
        time.sleep(1.0)
