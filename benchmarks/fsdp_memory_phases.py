"""Where an FSDP worker's memory goes, phase by phase: the worker's resident set and glibc's own
count of the bytes it has handed out (in use) and holds freed (arena free), sampled every 3 ms and
labelled with the phase the worker is in; and the collectives each phase issued.

    python benchmarks/fsdp_memory_phases.py [--layers 12 --width 768] [--no-shared-context] [--compare-trim]

Runs FinetuneStep as benchmarks/sharded_memory.py does (FSDP on 2 CPU workers, gloo, a checkpoint
after every step), 2 steps, and prints rank 0's second step. Phases: the training forward pass,
the backward pass of each transformer block (marked when the block's output gradient arrives;
``call 1`` is a block's first forward call of the step, the contexts' under shared-context
training, ``call 2`` its second, the continuations'), the optimizer step, validation and the
checkpoint. In use growing while arena free does not is live tensors, not the allocator. Then,
per step, the worker's peak and the phase it was in, the step's seconds (forward to the end of the
optimizer step) and the seconds the training loop's heap trim took (``release_freed_heap``).
``--compare-trim`` runs the training twice, the trim turned off in the first run, on in the second.

The workers import this module (Tango's ``import_extra_module``, which the launcher repeats in
every worker); with ``FSDP_MEMORY_TRACE`` set, importing it installs the tracer: torch's global
module and optimizer hooks, and wrappers around ``torch.distributed``'s collectives and
checkpoint save; with ``FSDP_MEMORY_NO_TRIM`` set too, the training loop's heap trim is skipped.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30
TRACE = "FSDP_MEMORY_TRACE"
NO_TRIM = "FSDP_MEMORY_NO_TRIM"

RUN = """
from tango.common.util import import_extra_module
from tango.workspaces import LocalWorkspace
from catwalk_steps import FinetuneStep, PiqaTask
import_extra_module("fsdp_memory_phases")  # and so in every worker
task = PiqaTask(data_files={{"train": "{repo}/data/tiny/train.jsonl", "validation": "{repo}/data/tiny/validation.jsonl"}})
step = FinetuneStep(model="rc::{model}", tasks=[task], strategy="fsdp", device="cpu", device_count=2, batch_size=4,
                    micro_batch_size=2, train_limit=8, validation_limit=4, validate_every=1, train_epochs=1,
                    learning_rate=1e-5, shared_context={shared_context}, step_name="phases")
step.result(LocalWorkspace("{workspace}"))
"""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


class Tracer:
    """Samples (time, phase, resident bytes, malloc bytes in use, malloc bytes held free) and
    records collectives (time, name, input bytes, phase); written as JSON when the process exits."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.phase, self.samples, self.collectives = directory, "start", [], []
        self.libc = ctypes.CDLL(None)
        self.libc.mallinfo2.restype = _MallInfo2
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.step, self.calls, self.trims = 0, {}, []

    def sample(self) -> None:
        info = self.libc.mallinfo2()
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * self.page
        self.samples.append((time.perf_counter(), self.phase, resident, info.uordblks + info.hblkhd, info.fordblks))

    def mark(self, phase: str) -> None:
        self.phase = f"step {self.step}: {phase}"
        self.sample()

    def run_sampler(self) -> None:
        while True:
            self.sample()
            time.sleep(0.003)

    def write(self) -> None:
        if any(phase != "start" for _, phase, *_ in self.samples):  # a worker, not the step's process
            path = self.directory / f"rank{os.environ.get('RANK', 'x')}-{os.getpid()}.json"
            path.write_text(json.dumps({"samples": self.samples, "collectives": self.collectives, "trims": self.trims}))

    def install(self) -> None:
        import atexit

        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def kind(module) -> str:  # fully_shard renames the class FSDP<name>
            name = type(module).__name__
            return name[4:] if name.startswith("FSDP") else name

        def before_forward(module, args):
            if kind(module) == "RankClassificationModel":
                self.mark("forward" if module.training else "validation")

        def after_forward(module, args, output):
            if not (module.training and torch.is_grad_enabled()):
                return
            if kind(module) == "RankClassificationModel" and output["loss"].requires_grad:
                output["loss"].register_hook(lambda grad: self.mark("backward, output layer"))
            elif kind(module) in blocks:
                key = (self.step, id(module))
                self.calls[key] = call = self.calls.get(key, 0) + 1
                hidden = output[0] if isinstance(output, tuple) else output
                label = f"backward, call {call}, block {blocks[kind(module)].setdefault(id(module), len(blocks[kind(module)]))}"
                if hidden.requires_grad:
                    hidden.register_hook(lambda grad: self.mark(label))

        def optimizer_step(optimizer, args, kwargs):
            self.mark("optimizer")

        def optimizer_done(optimizer, args, kwargs):
            self.step += 1
            self.mark("after the optimizer")

        blocks = {"GPT2Block": {}}  # the transformer blocks of the benchmark's GPT-2: class -> {id: index}
        register_module_forward_pre_hook(before_forward)
        register_module_forward_hook(after_forward)
        register_optimizer_step_pre_hook(optimizer_step)
        register_optimizer_step_post_hook(optimizer_done)
        for name in [n for n in dir(dist) if "reduce_scatter" in n or "all_gather" in n or n == "all_reduce"]:
            setattr(dist, name, self._recording(name, getattr(dist, name)))
        dcp.save = self._marking("checkpoint", dcp.save)
        self._time_trim()
        threading.Thread(target=self.run_sampler, daemon=True).start()
        atexit.register(self.write)

    def _time_trim(self) -> None:
        """Times the training loop's heap trims (or turns them off, with ``FSDP_MEMORY_NO_TRIM``)."""
        from catwalk_steps.distributed import heap
        from catwalk_steps.training import loop

        trim = heap._TRIM

        def timed(pad):
            start = time.perf_counter()
            trim(pad)
            self.trims.append((start, time.perf_counter() - start, self.phase))

        if os.environ.get(NO_TRIM):
            loop.release_freed_heap_while_training = lambda model, optimizer: None
        elif trim is not None:
            heap._TRIM = timed

    def _recording(self, name, collective):
        import torch

        def recorded(*args, **kwargs):
            tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            size = max((t.numel() * t.element_size() for t in tensors), default=0)
            self.collectives.append((time.perf_counter(), name, size, self.phase))
            return collective(*args, **kwargs)

        return recorded

    def _marking(self, phase, function):
        def marked(*args, **kwargs):
            self.mark(phase)
            return function(*args, **kwargs)

        return marked


if os.environ.get(TRACE) and __name__ != "__main__":
    Tracer(Path(os.environ[TRACE])).install()


def report(path: Path, step: int) -> None:
    """Per phase of ``step`` (in the order first seen): the largest of each count, and the
    collectives issued."""
    trace = json.loads(path.read_text())
    prefix = f"step {step}: "
    phases = {}
    for _, phase, resident, in_use, free in trace["samples"]:
        if phase.startswith(prefix):
            peak = phases.setdefault(phase[len(prefix):], [0, 0, 0])
            for i, value in enumerate((resident, in_use, free)):
                peak[i] = max(peak[i], value)
    collectives = {}
    for _, name, size, phase in trace["collectives"]:
        if phase.startswith(prefix):
            counted = collectives.setdefault(phase[len(prefix):], {}).setdefault(name, [0, 0])
            counted[0] += 1
            counted[1] = max(counted[1], size)
    print(f"| phase (step {step + 1}) | resident GiB | malloc in use GiB | malloc arena free GiB | collectives (largest tensor) |")
    print("| --- | ---: | ---: | ---: | --- |")
    for phase, (resident, in_use, free) in phases.items():
        issued = ", ".join(f"{n} {name} ({size / 2**20:.0f} MiB)" for name, (n, size) in collectives.get(phase, {}).items())
        print(f"| {phase} | {resident / GiB:.3f} | {in_use / GiB:.3f} | {free / GiB:.3f} | {issued} |")


def summarise(path: Path, label: str) -> None:
    """Per step: the worker's peak resident set and its phase (from the previous step's optimizer
    step to this one's), the training step's seconds (its forward pass to the end of its optimizer
    step), and the seconds spent trimming the heap in them."""
    trace = json.loads(path.read_text())
    steps = {}
    for when, phase, resident, *_ in trace["samples"]:
        if phase == "start":
            continue
        number, name = phase.split(": ", 1)
        step = steps.setdefault(int(number.split()[1]), {"peak": (0, ""), "start": None, "end": None})
        step["peak"] = max(step["peak"], (resident, name))
        if name == "forward" and step["start"] is None:
            step["start"] = when
        if name == "after the optimizer" and step["end"] is None:
            step["end"] = when
    print(f"\n| {label}: step | worker peak GiB | in phase | training s | heap trim s |")
    print("| --- | ---: | --- | ---: | ---: |")
    for number in sorted(steps):
        if steps.get(number + 1, {}).get("end") is None or steps[number]["start"] is None:
            continue  # the step's forward and the end of its optimizer step (labelled with the next step)
        seconds = steps[number + 1]["end"] - steps[number]["start"]
        trimmed = sum(took for start, took, _ in trace["trims"] if steps[number]["start"] <= start <= steps[number + 1]["end"])
        (resident, phase) = steps[number]["peak"]
        print(f"| {label}: {number + 1} | {resident / GiB:.3f} | {phase} | {seconds:.2f} | {trimmed:.3f} |")
    peak = max(resident for _, _, resident, *_ in trace["samples"])
    print(f"worker's peak over the run: {peak / GiB:.3f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--no-shared-context", dest="shared_context", action="store_false")
    parser.add_argument("--compare-trim", action="store_true",
                        help="run twice: without the training loop's heap trim, then with it")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    import sharded_memory

    sharded_memory.SHAPE.update(n_layer=args.layers, n_embd=args.width, n_head=args.width // 64)
    runs = [("without trim", True), ("with trim", False)] if args.compare_trim else [("with trim", False)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        parameters = sharded_memory.build_model(tmp / "model")
        traces = []
        for number, (label, no_trim) in enumerate(runs):
            (tmp / f"trace-{number}").mkdir()
            script = RUN.format(repo=REPO, model=tmp / "model", workspace=tmp / f"ws-{number}",
                                shared_context=args.shared_context)
            env = {**{k: v for k, v in os.environ.items() if k != NO_TRIM}, "PYTHONPATH": f"{REPO}:{REPO / 'benchmarks'}",
                   "OMP_NUM_THREADS": "1", TRACE: str(tmp / f"trace-{number}"), **({NO_TRIM: "1"} if no_trim else {})}
            subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, check=True)
            traces.append((label, min((tmp / f"trace-{number}").glob("rank0-*.json"))))
        print(f"\n{args.layers} x {args.width}, {parameters / 1e6:.0f}M parameters: float32 weights {parameters * 4 / GiB:.3f} "
              f"GiB, full state (weights + Adam) {parameters * 12 / GiB:.3f} GiB; shared_context={args.shared_context}")
        for label, trace in traces:
            print(f"\n{label}:")
            report(trace, step=1)
        for label, trace in traces:
            summarise(trace, label)


if __name__ == "__main__":
    main()
