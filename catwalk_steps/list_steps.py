"""Lists the steps of a config, one a line, for spreading a sweep over many ``tango run -s``
processes (Slurm jobs: ``examples/slurm_sweep.sh``, docs/sweeps.md):

    python -m catwalk_steps.list_steps configs/sweep_tiny.jsonnet --type catwalk::calculate_metrics
    python -m catwalk_steps.list_steps CONFIG --type catwalk::calculate_metrics --needs catwalk::finetune \\
        --uncached-in WORKSPACE

``--needs TYPE`` follows each name with the steps of that type it needs (directly or through
other steps), so that its job can wait for theirs; ``--uncached-in`` leaves out the steps that
workspace's cache holds, so that a sweep submitted again submits only what is left. Steps come in
an order where every step comes after the steps it needs. Nothing is run: the config's steps are
built (as ``tango run`` builds them, for their cache keys) and their results looked up.
"""

import argparse
from typing import Dict, List, NamedTuple, Optional

from tango.common import Params
from tango.common.util import import_extra_module
from tango.step import Step
from tango.step_graph import StepGraph
from tango.workspaces import LocalWorkspace


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


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a Tango config (jsonnet, json or yaml)")
    parser.add_argument("--type", dest="step_type", help="only steps of this registered type")
    parser.add_argument("--needs", metavar="TYPE", help="follow each name with the steps of this type it needs")
    parser.add_argument("--uncached-in", metavar="WORKSPACE", help="only steps this local workspace has not cached")
    args = parser.parse_args(argv)
    steps = read(args.config)
    for option in (args.step_type, args.needs):
        if option is not None and option not in Step.list_available():  # a typo would list nothing
            parser.error(f"no step type {option!r} is registered")
    names = step_names(steps, args.step_type, args.uncached_in)
    if not names and args.uncached_in is None:
        parser.error(f"{args.config} has no steps" + (f" of type {args.step_type}" if args.step_type else ""))
    for name in names:
        print(" ".join([name, *(needed(steps, name, args.needs) if args.needs else [])]))


if __name__ == "__main__":
    main()
