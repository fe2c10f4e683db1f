"""DPO: our ``catwalk::finetune`` on preference pairs against TRL 1.16's ``DPOTrainer``, on the
same model, pairs, batch and epochs, each side a fresh process timed from start to exit (issue 54:
ours <= 0.5x TRL's wall).

    pip install -e ".[bench]" trl==1.16.0
    python benchmarks/dpo_speed.py                  # CPU: 4-layer, 256-wide Llama, 256 pairs, 1 epoch, batch 16

Model: sft_speed.py's (a randomly initialised Llama, Mistral-7B v0.1's tokenizer, Zephyr's chat
template). Pairs: the preference demo's 256 conversational training pairs
(``data/tiny/preference/train.jsonl``). Both sides at their defaults but for what makes them
comparable: AdamW at 5e-6, beta 0.1, sigmoid loss, no warm-up, no validation, no checkpoints,
float32, TRL on CPU without gradient checkpointing. Where the time goes: as sft_speed.py splits
it (start-up, preparation, training, the rest); ours measures the reference before the first
step, inside preparation's clock, TRL's during its steps.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sft_speed import REPO, build_model, timed_phases

PAIRS = REPO / "data" / "tiny" / "preference" / "train.jsonl"
EPOCHS, BATCH, LEARNING_RATE = 1, 16, 5e-6


def run_ours(model: Path, work: Path) -> dict:
    started = time.perf_counter()
    from tango.workspaces import LocalWorkspace  # noqa: F401 (counted in start-up)

    from catwalk_steps import FinetuneStep
    from catwalk_steps.tasks import PreferenceTask
    from catwalk_steps.training import throughput  # noqa: F401

    imported = time.perf_counter()
    step = FinetuneStep(
        model=f"rc::{model}", tasks=[PreferenceTask(data_files={"train": str(PAIRS)})], apply_chat_template=True,
        batch_size=BATCH, train_epochs=EPOCHS, learning_rate=LEARNING_RATE, warmup_fraction=0.0,
        validation_split=None, step_name="finetune",
    )
    return timed_phases(step, work, started, imported)


def run_trl(model: Path, work: Path) -> dict:
    started = time.perf_counter()
    import trl
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    imported = time.perf_counter()
    config = trl.DPOConfig(
        output_dir=str(work), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
        per_device_train_batch_size=BATCH, num_train_epochs=EPOCHS, learning_rate=LEARNING_RATE, warmup_steps=0,
        save_strategy="no", logging_strategy="no", dataloader_drop_last=True,
    )
    trainer = trl.DPOTrainer(model=AutoModelForCausalLM.from_pretrained(model), args=config,
                             processing_class=AutoTokenizer.from_pretrained(model),
                             train_dataset=load_dataset("json", data_files=str(PAIRS), split="train"))
    prepared = time.perf_counter()
    trainer.train()
    trained = time.perf_counter()
    trainer.save_model(str(work / "final"))
    return {"start-up": imported - started, "preparation": prepared - imported, "training": trained - prepared}


def measured(side: str, model: Path) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", side, "--model", str(model)], env=env,
                          capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-3000:]}")
    phases = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    phases["rest"] = wall - sum(phases.values())
    return {"wall": wall, **phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=["ours", "trl"])
    parser.add_argument("--model", type=Path)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as work:
            phases = (run_ours if args.child == "ours" else run_trl)(args.model, Path(work))
        print("RESULT " + json.dumps(phases))
        return
    with tempfile.TemporaryDirectory() as directory:
        model = build_model(Path(directory))
        results = {side: measured(side, model) for side in ("ours", "trl")}
    pairs = len(PAIRS.read_text().splitlines())
    print(f"\n{pairs} pairs, {EPOCHS} epoch, batch {BATCH}, CPU, {os.cpu_count()} cores, torch threads default\n")
    print("| side | wall s | pairs/s | start-up s | preparation s | training s | rest s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for side, r in results.items():
        print(f"| {side} | {r['wall']:.1f} | {pairs * EPOCHS / r['wall']:.1f} | {r['start-up']:.1f} | "
              f"{r['preparation']:.1f} | {r['training']:.1f} | {r['rest']:.1f} |")
    print(f"\nours / TRL, wall: {results['ours']['wall'] / results['trl']['wall']:.2f}x (goal <= 0.5x)")


if __name__ == "__main__":
    main()
