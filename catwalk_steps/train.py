"""Fine-tunes a model and scores it before and after, from the command line, as catwalk did:

    python -m catwalk_steps.train --model rc::gpt2 --task piqa --device_count 2 --batch_size 16 -w workspace

It builds the steps of ``lib.finetune_and_evaluate_tasks`` (catwalk_steps/configs/lib.libsonnet) and runs them
in the Tango workspace: the same steps and cache keys as a config calling that helper with the
same settings, so nothing the command computed is computed again by a config, or the other way
round. It ends with the table: every task zero-shot and fine-tuned, with the fine-tuned model's
paired difference to the stock one (``Δ acc [95% CI]``, ``p``); with ``--output_dir``, the
predictions, the table and each task's changed instances (all but perplexity's) land there.
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
    from .steps.finetune import FinetuneStep
    from .steps.predict import PredictStep
    from .training.settings import FinetuneSettings

    p = argparse.ArgumentParser(
        prog="python -m catwalk_steps.train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="the model to fine-tune: rc::gpt2, rc::/path/to/model")
    add_common_flags(p)
    trained = add_step_flags(p.add_argument_group("catwalk::finetune's settings"), FinetuneStep.run,
                             setting_docs(FinetuneStep.run, FinetuneSettings))
    add_step_flags(p.add_argument_group("catwalk::predict's settings (those both steps take: both)"), PredictStep.run,
                   setting_docs(PredictStep.run), taken=[*trained, *OWN_SETTINGS])
    return p


def build(args: argparse.Namespace) -> str:
    from .steps.finetune import FinetuneStep
    from .steps.predict import PredictStep

    tasks, splits = resolve_tasks(args.task, parse_data_files(args.data_files), args.max_new_tokens)
    built = built_tasks(tasks)
    untrainable = [name for name, task in built.items() if "train" not in task.splits]
    if untrainable:  # refused now, not after the zero-shot scoring ran
        raise ConfigurationError(
            f"Fine-tuning needs a train split, which {', '.join(untrainable)} has not"
            + (" (give --data_files train=PATH)" if args.data_files else "")
        )
    if args.split is not None:
        splits = {task: args.split for task in tasks}
    return lib_call(
        "finetune_and_evaluate_tasks", args.model, tasks, given_settings(args, FinetuneStep.run),
        predict=given_settings(args, PredictStep.run, OWN_SETTINGS), splits=splits, output_dir=args.output_dir,
        diffs=diffable(built),
    )


def main(argv: Optional[List[str]] = None) -> int:
    return main_with(build, parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
