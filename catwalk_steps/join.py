"""Joins a multi-node ``catwalk::finetune`` run (``nodes: N``) from another machine:

    python -m catwalk_steps.join CONFIG STEP_NAME -w WORKSPACE

Run it on each machine but the one running ``tango run`` (node 0), with the same config and the
same workspace, on a filesystem every machine sees. It builds the same step, waits for node 0's
rendezvous endpoint in the step's work dir (any node may start first), runs this machine's
``device_count`` workers until training ends, then waits for node 0 to cache the result. It exits
0 when the step succeeded (also when it was already cached), and 1 with the reason when it failed
or when no node 0 appeared within ``--timeout`` seconds.
"""

import argparse
import sys
import time
from typing import List, Optional

from tango.common.util import import_extra_module
from tango.step_graph import StepGraph
from tango.step_info import StepState
from tango.workspace import Workspace


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="the Tango config that node 0 runs")
    parser.add_argument("step", help="the name of the catwalk::finetune step in it")
    parser.add_argument("-w", "--workspace", required=True, help="node 0's workspace (a path or URL)")
    parser.add_argument("-i", "--include-package", action="append", default=[], help="more packages to import")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for node 0 (default 600)")
    args = parser.parse_args(argv)

    for package in ["catwalk_steps", *args.include_package]:
        import_extra_module(package)
    from catwalk_steps import FinetuneStep

    graph = StepGraph.from_file(args.config)
    if args.step not in graph:
        parser.error(f"{args.config} has no step {args.step!r} (it has: {', '.join(graph)})")
    step = graph[args.step]
    if not isinstance(step, FinetuneStep) or step.kwargs.get("nodes", 1) < 2:
        parser.error(f"step {args.step!r} is not a catwalk::finetune step with nodes > 1")
    workspace = Workspace.from_url(args.workspace)
    if step in workspace.step_cache:
        print(f"{args.step} is already computed ({step.unique_id})")
        return 0
    try:
        step.join(workspace, timeout=args.timeout)
    except (TimeoutError, RuntimeError) as e:
        print(f"catwalk_steps.join: {args.step} failed on this node: {e}", file=sys.stderr)
        return 1
    return _wait_for_result(workspace, step, args.timeout)


def _wait_for_result(workspace: Workspace, step, timeout: float) -> int:
    """Node 0 writes the result after the workers end: its outcome is the step's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step in workspace.step_cache:
            print(f"{step.name} succeeded ({step.unique_id})")
            return 0
        if workspace.step_info(step).state == StepState.FAILED:
            print(f"catwalk_steps.join: {step.name} failed on node 0 (see its log)", file=sys.stderr)
            return 1
        time.sleep(1.0)
    print(f"catwalk_steps.join: node 0 wrote no result for {step.name} within {timeout:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
