"""How each node of a multi-node step starts its workers. Node 0 (the process running the step)
publishes a rendezvous endpoint in the step's work dir for as long as its workers run; every
other node (``python -m catwalk_steps.join``) waits for that endpoint, then starts its own. A
rendezvous left by a node 0 that died fails: the joining node then awaits node 0's next one."""

import logging
from pathlib import Path
from typing import Callable, Optional

from .launch import Nodes
from .rendezvous import publish, wait_for_endpoint, withdraw

logger = logging.getLogger(__name__)

#: Seconds a node waits for the others of a multi-node run to arrive.
RENDEZVOUS_TIMEOUT = 600

#: Starts this node's workers, meeting the other nodes' through ``Nodes``, and returns when they end.
StartWorkers = Callable[[Nodes], None]


def run_as_node_zero(start: StartWorkers, work_dir: Path, nodes: int, port: Optional[int]) -> None:
    """Node 0's side: alone, its workers meet on ``port`` (by default one the OS picks); with
    other nodes, at an endpoint published in ``work_dir`` while the workers run."""
    if nodes == 1:
        start(Nodes(endpoint=f"localhost:{port or 0}"))
        return
    meeting = publish(work_dir, nodes, port, RENDEZVOUS_TIMEOUT)
    try:
        start(meeting)
    finally:
        withdraw(work_dir, meeting)


def run_as_joining_node(start: StartWorkers, work_dir: Path, timeout: float) -> None:
    """Another node's side: waits up to ``timeout`` seconds for node 0's endpoint in ``work_dir``,
    then runs this node's workers with it until they end."""
    from torch.distributed.elastic.rendezvous import RendezvousError

    tried = None
    while True:
        nodes = wait_for_endpoint(work_dir, timeout, not_run=tried)
        try:
            start(nodes)
            return
        except RendezvousError as e:
            logger.warning("The rendezvous of run %s failed (%s); waiting for node 0's next", nodes.run_id, e)
            tried = nodes.run_id
