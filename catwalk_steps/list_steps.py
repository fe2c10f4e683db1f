"""Lists the step names of a config, one a line, for spreading a sweep over many ``tango run -s``
processes (a Slurm job array: job *i* runs the *i*-th name; see ``examples/``):

    python -m catwalk_steps.list_steps configs/sweep_tiny.jsonnet --type catwalk::calculate_metrics

Reads the config only: nothing is imported, built or run.
"""

import argparse
from typing import List, Optional

from tango.common import Params


def step_names(config: str, step_type: Optional[str] = None) -> List[str]:
    """The names of ``config``'s steps, of type ``step_type`` if given, in the config's order."""
    steps = Params.from_file(config).as_dict(quiet=True)["steps"]
    return [name for name, step in steps.items() if step_type is None or step.get("type") == step_type]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a Tango config (jsonnet, json or yaml)")
    parser.add_argument("--type", dest="step_type", help="only steps of this registered type")
    args = parser.parse_args(argv)
    names = step_names(args.config, args.step_type)
    if not names:
        parser.error(f"{args.config} has no steps" + (f" of type {args.step_type}" if args.step_type else ""))
    print("\n".join(names))


if __name__ == "__main__":
    main()
