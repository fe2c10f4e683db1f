"""Lists the steps of a config, one a line, and plans the Slurm jobs that spread a sweep over many
``tango run -s`` processes (``examples/slurm_sweep.sh``, docs/sweeps.md):

    python -m catwalk_steps.list_steps configs/sweep_tiny.jsonnet --type catwalk::calculate_metrics
    python -m catwalk_steps.list_steps CONFIG --type catwalk::calculate_metrics --uncached-in WORKSPACE
    python -m catwalk_steps.list_steps CONFIG --leftovers WORKSPACE
    python -m catwalk_steps.list_steps CONFIG --plan WORKSPACE [--finetuning STEP]

``--uncached-in`` leaves out the steps that workspace's cache holds. Steps come in an order where
every step comes after the steps it needs. ``--leftovers`` prints the ids of the jobs of this
config and workspace's sweep still in Slurm's queue, for ``scancel``; ``--plan`` waits until they
have ended (so that a step they finish meanwhile is not submitted again), then prints the sweep's
job name and the jobs that finish it, one a line, in the form ``Job.line`` gives; with
``--finetuning STEP``, only that fine-tuning's job, cached or not (``examples/slurm_finetune.sh``).
Nothing is run: the config's steps are built (as ``tango run`` builds them, for their cache keys)
and their results looked up.
"""

import argparse
import os
import shlex
import subprocess
import time
import zlib
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from tango.common import Params
from tango.common.util import import_extra_module
from tango.step import Step
from tango.step_graph import StepGraph
from tango.workspaces import LocalWorkspace

FINETUNE, METRICS = "catwalk::finetune", "catwalk::calculate_metrics"
#: Seconds ``--plan`` waits for cancelled jobs to end (Slurm gives their processes KillWait seconds).
LEFTOVERS_TIMEOUT = 300.0


class Steps(NamedTuple):
    """A config's steps, each after the steps it needs, and their registered types by name."""

    ordered: List[Step]
    types: Dict[str, str]


def read(config: str) -> Steps:
    import_extra_module("catwalk_steps")  # its steps must be registered to be built
    steps = Params.from_file(config).pop("steps", keep_as_dict=True)  # the config evaluated once
    types = {name: step["type"] for name, step in steps.items()}
    return Steps(StepGraph.ordered_steps(dict(StepGraph.from_params(steps))), types)


def step_names(steps: Steps, step_type: Optional[str] = None, uncached_in: Optional[str] = None) -> List[str]:
    """The names of the steps of type ``step_type`` if given, not in the cache of the workspace at
    ``uncached_in`` if given, in order."""
    cache = LocalWorkspace(uncached_in).step_cache if uncached_in else None
    return [
        step.name
        for step in steps.ordered
        if (step_type is None or steps.types[step.name] == step_type) and (cache is None or step not in cache)
    ]


def needed(steps: Steps, name: str, step_type: str) -> List[str]:
    """The names of the steps of type ``step_type`` that step ``name`` needs, directly or not."""
    (step,) = [step for step in steps.ordered if step.name == name]
    return sorted(other.name for other in step.recursive_dependencies if steps.types[other.name] == step_type)


class Job(NamedTuple):
    """One Slurm job of a sweep."""

    key: str  # its name in the plan (what later jobs wait for) and its log's stem
    stage: str  # finetune, evaluate or table: whose sbatch options it takes
    nodes: int
    after: str  # the dependency type: afterok (Slurm cancels the job if one failed) or afterany
    waits_for: List[str]  # the keys of the jobs above it it waits for
    command: List[str]  # what it runs

    def line(self) -> str:
        """``KEY STAGE NODES AFTER COMMAND``, what ``read -r key stage nodes after command`` takes
        apart: AFTER is ``-`` or the dependency by keys (``afterok:KEY:KEY``), COMMAND the rest of
        the line, quoted for ``sh`` (``sbatch --wrap``)."""
        after = ":".join([self.after, *self.waits_for]) if self.waits_for else "-"
        return " ".join([self.key, self.stage, str(self.nodes), after, shlex.join(self.command)])


def finetune_job(steps: Steps, name: str, config: str, workspace: str, waits_for: Sequence[str] = ()) -> Job:
    """A fine-tuning step's job: ``nodes`` nodes, one ``srun`` task each (node 0 runs the step,
    the others join it: ``examples/finetune_node.sh``)."""
    (step,) = [step for step in steps.ordered if step.name == name]
    command = ["srun", "--ntasks-per-node=1", "examples/finetune_node.sh", config, name, workspace]
    return Job(name, "finetune", step.kwargs.get("nodes", 1), "afterok", list(waits_for), command)


def plan(steps: Steps, uncached: Set[str], config: str, workspace: str) -> List[Job]:
    """The jobs that compute the steps named in ``uncached`` and then the table, in submission
    order: each fine-tuning a job, after the fine-tunings it needs that are submitted here; the
    metrics steps (with their predictions) one job per set of fine-tunings they need (one start-up
    for a model's evaluations), after those submitted here; the table job after every other job,
    however it ended."""
    finetunes = [name for name in step_names(steps, FINETUNE) if name in uncached]

    def submitted(names: Sequence[str]) -> List[str]:
        return [name for name in names if name in finetunes]

    jobs = [finetune_job(steps, name, config, workspace, submitted(needed(steps, name, FINETUNE))) for name in finetunes]
    evaluations: Dict[Tuple[str, ...], List[str]] = {}  # by the fine-tunings they need, in order
    for name in step_names(steps, METRICS):
        if name in uncached:
            evaluations.setdefault(tuple(needed(steps, name, FINETUNE)), []).append(name)
    for needs, names in evaluations.items():
        command = ["tango", "run", config, "-w", workspace, *[word for name in names for word in ("-s", name)]]
        jobs.append(Job(f"evaluate-{'+'.join(needs) or 'stock'}", "evaluate", 1, "afterok", submitted(needs), command))
    table = ["examples/sweep_table.sh", config, workspace]
    return [*jobs, Job("table", "table", 1, "afterany", [job.key for job in jobs], table)]


def sweep_name(config: str, workspace: str) -> str:
    """The job name of every job of the sweep of ``config`` in ``workspace``: how a submission
    finds the jobs of earlier ones."""
    paths = "\n".join(os.path.realpath(path) for path in (config, workspace))
    return f"sweep-{Path(config).name.removesuffix('.jsonnet')}-{zlib.crc32(paths.encode())}"


def queued_jobs(name: str) -> List[str]:
    """The ids of this user's jobs named ``name`` still in Slurm's queue (pending or running)."""
    listed = subprocess.run(["squeue", "--me", "--noheader", f"--name={name}", "--format=%A"],
                            capture_output=True, text=True, check=True)
    return sorted(set(listed.stdout.split()), key=int)


def wait_until_ended(name: str) -> None:
    deadline = time.monotonic() + LEFTOVERS_TIMEOUT
    while queued := queued_jobs(name):
        if time.monotonic() > deadline:
            raise SystemExit(f"list_steps: job {' '.join(queued)} of {name} still queued after {LEFTOVERS_TIMEOUT:g} s: "
                             f"a plan beside it could compute its steps twice (scancel {' '.join(queued)})")
        time.sleep(1)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a Tango config (jsonnet, json or yaml)")
    parser.add_argument("--type", dest="step_type", help="only steps of this registered type")
    parser.add_argument("--uncached-in", metavar="WORKSPACE", help="only steps this local workspace has not cached")
    parser.add_argument("--leftovers", metavar="WORKSPACE", help="the ids of the sweep's jobs still in Slurm's queue")
    parser.add_argument("--plan", metavar="WORKSPACE", help="once they have ended: the sweep's job name and jobs")
    parser.add_argument("--finetuning", metavar="STEP", help="with --plan: only this fine-tuning's job")
    args = parser.parse_args(argv)
    if args.leftovers:
        print(" ".join(queued_jobs(sweep_name(args.config, args.leftovers))))
        return
    if args.finetuning and not args.plan:
        parser.error("--finetuning needs --plan WORKSPACE")
    steps = read(args.config)
    if args.finetuning:
        if steps.types.get(args.finetuning) != FINETUNE:
            parser.error(f"{args.config} has no {FINETUNE} step {args.finetuning!r}")
        print(finetune_job(steps, args.finetuning, args.config, args.plan).line())
    elif args.plan:
        name = sweep_name(args.config, args.plan)
        wait_until_ended(name)
        uncached = set(step_names(steps, uncached_in=args.plan))
        print("\n".join([name, *(job.line() for job in plan(steps, uncached, args.config, args.plan))]))
    else:
        if args.step_type is not None and args.step_type not in Step.list_available():  # a typo would list nothing
            parser.error(f"no step type {args.step_type!r} is registered")
        names = step_names(steps, args.step_type, args.uncached_in)
        if not names and args.uncached_in is None:
            parser.error(f"{args.config} has no steps" + (f" of type {args.step_type}" if args.step_type else ""))
        print("\n".join(names))


if __name__ == "__main__":
    main()
