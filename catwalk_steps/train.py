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
    add_common_flags, add_step_flag, built_tasks, diffable, lib_call, main_with, model_settings,
    parse_data_files, predict_settings, resolve_tasks, step_defaults,
)

FINETUNE_FLAGS = {
    "batch_size": (int, "examples per optimizer step, over all devices"),
    "micro_batch_size": (int, "examples per forward pass on one device (the memory knob)"),
    "train_epochs": (int, "epochs over the training split"),
    "learning_rate": (float, "AdamW's learning rate"),
    "device_count": (int, "devices (CUDA devices, or CPU processes) training data-parallel"),
    "seed": (int, "the seed of data order, dropout and initialisation"),
    "train_limit": (int, "train on the first N training instances only"),
}


def parser() -> argparse.ArgumentParser:
    from .steps.finetune import FinetuneStep

    p = argparse.ArgumentParser(
        prog="python -m catwalk_steps.train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="the model to fine-tune: rc::gpt2, rc::/path/to/model")
    add_common_flags(p)
    defaults = step_defaults(FinetuneStep.run)
    for flag, (kind, text) in FINETUNE_FLAGS.items():
        add_step_flag(p, flag, defaults, text, kind)
    p.add_argument("--adapter", choices=["lora"], default=None, help="train a LoRA adapter (default: all weights)")
    return p


def build(args: argparse.Namespace) -> str:
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
    finetune = {flag: getattr(args, flag) for flag in FINETUNE_FLAGS if hasattr(args, flag)}
    if args.adapter:
        finetune["adapter"] = {"type": args.adapter}
    finetune.update(model_settings(args))  # trained as it is scored
    return lib_call(
        "finetune_and_evaluate_tasks", args.model, tasks, finetune,
        predict=predict_settings(args), splits=splits, output_dir=args.output_dir, diffs=diffable(built),
    )


def main(argv: Optional[List[str]] = None) -> int:
    return main_with(build, parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
