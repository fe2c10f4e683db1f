"""Memory at real model sizes, measured in one run on this machine (random init is fine):

1. Peak host memory (resident set sampled every 2 ms, above the level before loading) to load a
   fine-tuned GPT-2-medium shaped model (355M parameters) from a FinetuneStep cache entry, in float32 and
   bfloat16, as a multiple of the weights' bytes in that dtype: the previous path (float32 base
   model from_pretrained, the entry's state dict loaded over it, then cast) against today's
   (meta-device model, weights streamed once in the target dtype). Each load in a fresh process.
2. The cache entry of a LoRA fine-tune (default GPT-2 targets, r=8) against a full fine-tune's,
   at the GPT-2-small shape (124M).
3. Training on 2 CPU processes at the GPT-2-small shape: DDP, FSDP and LoRA (DDP), peak resident
   memory per worker and examples/s of the training loop.

    python benchmarks/model_size.py      # about 10 minutes on 2 cores; --skip-training
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tango.integrations.torch import TrainCallback

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30


class LoopTimer(TrainCallback):
    """Writes the seconds of rank 0's training loop (first to last batch) to ``out``."""

    def __init__(self, *args, out: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.out = out

    def pre_train_loop(self) -> None:
        self.start = time.perf_counter()

    def post_train_loop(self, step: int, epoch: int) -> None:
        if self.train_config.worker_id == 0:
            Path(self.out).write_text(str(time.perf_counter() - self.start))


def rss() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) * 1024


def load_in_fresh_process(entry: Path, path: str, dtype: str) -> dict:
    """Runs one load in a new interpreter; returns its peak RSS above its pre-load level."""
    script = f"""
import json, resource, sys, torch
from pathlib import Path
import benchmarks.model_size as b
from catwalk_steps import FinetunedModelFormat
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
import transformers.models.gpt2.modeling_gpt2  # imported before the baseline, as by any scorer
dtype = getattr(torch, {dtype!r})
entry = Path({str(entry)!r})
sys.path.insert(0, 'benchmarks')  # scoring.py imports its neighbours as top-level modules
from scoring import PeakMemory
with PeakMemory() as memory:
  if {path!r} == "previous":  # what PredictStep did before: base in float32, state dict over it, cast
    meta = json.loads((entry / "model.json").read_text())
    unique = load_file(str(entry / "model.safetensors"))
    state = {{k: unique[k] if k in unique else unique[meta["aliases"][k]] for k in meta["keys"]}}
    model = AutoModelForCausalLM.from_pretrained(meta["spec"]["pretrained"], dtype=torch.float32)
    model.load_state_dict(state)
    del state, unique
    model = model.to(dtype)
  else:
    model = FinetunedModelFormat().read(entry).load_model(dtype)
  touched = sum(float(p.detach().sum()) for p in model.parameters())  # every weight really in memory
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print(json.dumps({{"peak_above_base": memory.peak, "weights": weights}}))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def gpt2(directory: Path, n_layer: int, n_embd: int, n_head: int) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head)).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(REPO / "data" / "tiny" / "model" / name, directory / name)  # ids < 489: fine here
    return directory


def loading(root: Path) -> None:
    from catwalk_steps import FinetunedModel, FinetunedModelFormat
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained

    model = gpt2(root / "gpt2-medium", 24, 1024, 16)
    spec = ModelSpec.parse(f"rc::{model}")
    lm = load_pretrained(spec)
    entry = root / "entry"
    entry.mkdir()
    FinetunedModelFormat().write(FinetunedModel(spec, lm.state_dict(), {}), entry)
    del lm
    os.sync()  # as when an entry is read in a later run
    print("\n| load of a fine-tuned 355M model | dtype | weights (GiB) | peak above base (GiB) | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for dtype in ("float32", "bfloat16"):
        for path in ("previous", "today"):
            m = load_in_fresh_process(entry, path, dtype)
            print(f"| {path} | {dtype} | {m['weights'] / GiB:.2f} | {m['peak_above_base'] / GiB:.2f} | "
                  f"{m['peak_above_base'] / m['weights']:.2f}x |")


def cache_sizes(root: Path) -> None:
    from peft import get_peft_model_state_dict

    from catwalk_steps.models.adapters import add_adapter
    from catwalk_steps.models.loading import ModelSpec
    from catwalk_steps.models.weights import load_pretrained, save_weights

    spec = ModelSpec.parse(f"rc::{gpt2(root / 'gpt2-small', 12, 768, 12)}")
    full = root / "full.safetensors"
    save_weights(load_pretrained(spec).state_dict(), full)
    lora = root / "lora.safetensors"
    save_weights(get_peft_model_state_dict(add_adapter(load_pretrained(spec), {"type": "lora", "r": 8})), lora)
    ratio = lora.stat().st_size / full.stat().st_size
    print("\n| GPT-2-small cache entry | bytes | share of full |\n| --- | ---: | ---: |")
    print(f"| full fine-tune | {full.stat().st_size:,} | 100% |\n| LoRA r=8 (c_attn) | {lora.stat().st_size:,} | {ratio:.2%} |")


def training(root: Path) -> None:
    model = root / "gpt2-small"
    print("\n| GPT-2-small, 2 CPU processes | examples/s | peak RSS per worker (GiB) |\n| --- | ---: | ---: |")
    for name, settings in [("DDP, full", {"strategy": "ddp"}), ("FSDP, full", {"strategy": "fsdp"}),
                           ("DDP, LoRA r=8", {"strategy": "ddp", "adapter": {"type": "lora", "r": 8}})]:
        script = f"""
import json, resource, time
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace
from catwalk_steps import FinetuneStep, PiqaTask
from benchmarks.model_size import LoopTimer
data = {str(REPO / 'data' / 'tiny')!r}
task = PiqaTask(data_files={{"train": data + "/train.jsonl", "validation": data + "/validation.jsonl"}})
if __name__ == "__main__":
    step = FinetuneStep(model="rc::{model}", tasks=[task], batch_size=8, micro_batch_size=4, train_limit=48,
                        validation_limit=8, train_epochs=1, device_count=2, step_name="t", **{settings!r},
                        callbacks=[Lazy(LoopTimer, out={str(root / 'loop_seconds')!r})])
    step.result(LocalWorkspace({str(root / name.replace(' ', '').replace(',', ''))!r}))
    print(json.dumps({{"rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}}))
"""
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
        if done.returncode:
            print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1]} | |")
            continue
        peak = json.loads(done.stdout.strip().splitlines()[-1])["rss"]
        seconds = float((root / "loop_seconds").read_text())
        print(f"| {name} | {48 / seconds:.2f} | {peak / GiB:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--loading-only", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="model-size-"))
    try:
        loading(root)
        if args.loading_only:
            return
        cache_sizes(root)
        if not args.skip_training:
            training(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
