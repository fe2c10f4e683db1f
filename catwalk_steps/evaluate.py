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
    add_common_flags, add_step_flag, built_tasks, diffable, lib_call, main_with, model_name, parse_data_files,
    predict_settings, resolve_tasks, step_defaults,
)


def parser() -> argparse.ArgumentParser:
    from .steps.predict import PredictStep

    p = argparse.ArgumentParser(
        prog="python -m catwalk_steps.evaluate", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", action="append", required=True, help="a model spec (rc::gpt2, rc::/path); repeat for several")
    add_common_flags(p)
    add_step_flag(p, "device_count", step_defaults(PredictStep.run), "workers scoring the split", int)
    p.add_argument("--baseline", default=None, help="compare every other --model with this one (default: none)")
    return p


def build(args: argparse.Namespace) -> str:
    tasks, splits = resolve_tasks(args.task, parse_data_files(args.data_files), args.max_new_tokens)
    built = built_tasks(tasks)
    if args.split is not None:
        splits = {task: args.split for task in tasks}
    models = {model_name(spec): spec for spec in args.model}
    if args.baseline is not None and args.baseline not in args.model:
        raise ConfigurationError(f"--baseline {args.baseline!r} is not one of the --model values: {', '.join(args.model)}")
    predict = predict_settings(args)
    if hasattr(args, "device_count"):
        predict["device_count"] = args.device_count
    return lib_call(
        "evaluate_tasks", models, tasks, predict=predict, splits=splits, output_dir=args.output_dir,
        baseline=model_name(args.baseline) if args.baseline else None, diffs=diffable(built),
    )


def main(argv: Optional[List[str]] = None) -> int:
    return main_with(build, parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
