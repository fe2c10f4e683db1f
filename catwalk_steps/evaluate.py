"""Scores models on tasks from the command line, as catwalk did:

    python -m catwalk_steps.evaluate --model rc::gpt2 --model rc::gpt2-medium --task piqa -w workspace

It builds the steps of ``lib.evaluate_tasks`` (catwalk_steps/configs/lib.libsonnet) and runs them in the Tango
workspace, with the cache keys of a config calling that helper with the same settings. With
``--baseline MODEL`` every other model is compared with it, paired on the same instances, and
with ``--output_dir`` too, each task's changed instances (all but perplexity's) land in its diffs/.
"""

import argparse
import sys
from typing import List, Optional

from tango.common.exceptions import ConfigurationError

from .command_line import (
    OWN_SETTINGS, add_common_flags, built_tasks, diffable, lib_call, main_with, parse_data_files, resolve_tasks,
)
from .step_flags import add_step_flags, given_settings, setting_docs


def parser() -> argparse.ArgumentParser:
    from .steps.predict import PredictStep

    p = argparse.ArgumentParser(
        prog="python -m catwalk_steps.evaluate", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", action="append", required=True, help="a model spec (rc::gpt2, rc::/path); repeat for several")
    add_common_flags(p)
    p.add_argument("--baseline", default=None, help="compare every other --model with this one (default: none)")
    add_step_flags(p.add_argument_group("catwalk::predict's settings"), PredictStep.run, setting_docs(PredictStep.run),
                   taken=OWN_SETTINGS)
    return p


def build(args: argparse.Namespace) -> str:
    from .steps.predict import PredictStep

    tasks, splits = resolve_tasks(args.task, parse_data_files(args.data_files), args.max_new_tokens)
    built = built_tasks(tasks)
    if args.split is not None:
        splits = {task: args.split for task in tasks}
    if args.baseline is not None and args.baseline not in args.model:
        raise ConfigurationError(f"--baseline {args.baseline!r} is not one of the --model values: {', '.join(args.model)}")
    return lib_call(
        "evaluate_tasks", list(dict.fromkeys(args.model)), tasks, predict=given_settings(args, PredictStep.run, OWN_SETTINGS), splits=splits,
        output_dir=args.output_dir, baseline=args.baseline, diffs=diffable(built),
    )


def main(argv: Optional[List[str]] = None) -> int:
    return main_with(build, parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
