"""Fine-tuning on chat data: our ``catwalk::finetune`` against TRL 1.16's ``SFTTrainer``, on the
same model, rows, batch and epochs, unpacked and packed, each side a fresh process timed from
start to exit (issue 44: ours unpacked >= 2.5x TRL's rate, packed >= 2x TRL's packed rate and
never slower than our own unpacked run).

    pip install -e ".[bench]" trl==1.16.0
    python benchmarks/sft_speed.py                  # CPU: 4-layer, 256-wide Llama, 256 conversations, 2 epochs, batch 16

Model: a randomly initialised Llama (4 layers, 256 wide) with Mistral-7B v0.1's tokenizer (from
the ``mistral-common`` wheel) and Zephyr's chat template. Rows: the chat demo's 256 training
conversations (``data/tiny/chat/train.jsonl``). Both sides at their defaults but for what makes
them comparable: AdamW at 5e-5, no validation, no checkpoints, float32, TRL on CPU without
gradient checkpointing; the same rows learnt (every token: TRL's default for ``messages`` rows,
ours with ``assistant_only_loss: false``; the learnt mask costs nothing either way).

Where the time goes, per side: **start-up** (imports, up to the first line of our code),
**preparation** (reading and tokenising the rows, building the model, up to the first training
step), **training** (the steps: forward, backward, optimizer), **the rest** (saving the result,
exit). Examples/s and tokens/s are of the whole process (rows x epochs, and their tokens, over the
wall time), as a user waits for them.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROWS = REPO / "data" / "tiny" / "chat" / "train.jsonl"
EPOCHS, BATCH, WINDOW = 2, 16, 512


def build_model(directory: Path) -> Path:
    """The benchmark's model and tokenizer, saved in ``directory``."""
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tests.tiny_models import ZEPHYR_TEMPLATE, mistral_tokenizer

    mistral_tokenizer(directory / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(directory / "tokenizer")
    tokenizer.chat_template = ZEPHYR_TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=WINDOW,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    return directory / "model"


def run_ours(model: Path, packing: bool, work: Path) -> dict:
    started = time.perf_counter()
    from tango.workspaces import LocalWorkspace  # noqa: F401 (counted in start-up)

    from catwalk_steps import FinetuneStep
    from catwalk_steps.tasks import GenerationTask
    from catwalk_steps.training import throughput  # noqa: F401

    imported = time.perf_counter()
    step = FinetuneStep(
        model=f"rc::{model}", tasks=[GenerationTask(data_files={"train": str(ROWS)}, until=[], max_new_tokens=8)],
        apply_chat_template=True, assistant_only_loss=False, packing=packing, batch_size=BATCH, train_epochs=EPOCHS,
        learning_rate=5e-5, warmup_fraction=0.0, validation_split=None, step_name="finetune",
    )
    return timed_phases(step, work, started, imported)


def timed_phases(step, work: Path, started: float, imported: float) -> dict:
    """Runs ``step`` in a workspace in ``work``: its start-up (``started`` to ``imported``),
    preparation (to the loop's first timed step) and training, in seconds."""
    from tango.workspaces import LocalWorkspace

    from catwalk_steps.training import throughput

    first_step = []
    begin = throughput.Throughput.begin

    def begun(self):  # the loop's clock starts at each timed step: the first is where training begins
        if not first_step:
            first_step.append(time.perf_counter())
        return begin(self)

    throughput.Throughput.begin = begun
    step.result(LocalWorkspace(work))
    trained = time.perf_counter()
    return {"start-up": imported - started, "preparation": first_step[0] - imported, "training": trained - first_step[0]}


def run_trl(model: Path, packing: bool, work: Path) -> dict:
    started = time.perf_counter()
    import trl
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    imported = time.perf_counter()
    config = trl.SFTConfig(
        output_dir=str(work), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
        per_device_train_batch_size=BATCH, num_train_epochs=EPOCHS, learning_rate=5e-5, warmup_steps=0,
        save_strategy="no", logging_strategy="no", packing=packing, max_length=WINDOW, dataloader_drop_last=True,
    )
    trainer = trl.SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model), args=config,
                             processing_class=AutoTokenizer.from_pretrained(model),
                             train_dataset=load_dataset("json", data_files=str(ROWS), split="train"))
    prepared = time.perf_counter()
    trainer.train()
    trained = time.perf_counter()
    trainer.save_model(str(work / "final"))
    return {"start-up": imported - started, "preparation": prepared - imported, "training": trained - prepared}


def child(side: str, model: Path, packing: bool) -> None:
    with tempfile.TemporaryDirectory() as work:
        phases = (run_ours if side == "ours" else run_trl)(model, packing, Path(work))
    print("RESULT " + json.dumps(phases))


def measured(side: str, model: Path, packing: bool) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", side, "--model", str(model)]
                          + (["--packing"] if packing else []), env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{side} (packing={packing}) failed:\n{done.stderr[-3000:]}")
    phases = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    phases["rest"] = wall - sum(v for k, v in phases.items() if k in ("start-up", "preparation", "training"))
    return {"wall": wall, **phases}


def tokens_of_rows(model: Path) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line)["messages"] for line in ROWS.read_text().splitlines()]
    return sum(len(tokenizer.apply_chat_template(r, tokenize=True, return_dict=True)["input_ids"]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=["ours", "trl"])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--packing", action="store_true")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.model, args.packing)
    with tempfile.TemporaryDirectory() as directory:
        model = build_model(Path(directory))
        rows = len(ROWS.read_text().splitlines())
        tokens = tokens_of_rows(model)
        results = {(side, packing): measured(side, model, packing)
                   for packing in (False, True) for side in ("ours", "trl")}
    print(f"\n{rows} conversations ({tokens} tokens), {EPOCHS} epochs, batch {BATCH}, CPU, "
          f"{os.cpu_count()} cores, torch threads default\n")
    print("| side | packing | wall s | examples/s | tokens/s | start-up s | preparation s | training s | rest s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (side, packing), r in results.items():
        print(f"| {side} | {packing} | {r['wall']:.1f} | {rows * EPOCHS / r['wall']:.1f} | "
              f"{tokens * EPOCHS / r['wall']:.0f} | {r['start-up']:.1f} | {r['preparation']:.1f} | "
              f"{r['training']:.1f} | {r['rest']:.1f} |")
    rate = {key: rows * EPOCHS / r["wall"] for key, r in results.items()}
    print(f"\nours / TRL, unpacked: {rate['ours', False] / rate['trl', False]:.2f}x (goal >= 2.5x)")
    print(f"ours / TRL, packed: {rate['ours', True] / rate['trl', True]:.2f}x (goal >= 2x)")
    print(f"ours packed / ours unpacked: {rate['ours', True] / rate['ours', False]:.2f}x (goal >= 1x)")


if __name__ == "__main__":
    main()
