"""``backend: "vllm"`` against lm-evaluation-harness 0.4.13's own ``--model vllm`` (its CLI, in a
process of its own, unpatched) and against our HF backend, on a GSM8K-shaped task through our
``lm_eval`` task type (lm-eval's own gsm8k.yaml on local rows, 2-shot) and a tiny random GPT-2.

Runs only where vLLM is installed: CI's vLLM job (.ci/run), a venv of its own (docs/install.md).
One engine at a time, each with a 1 GiB KV cache: vLLM's engine on CPU claims memory up front."""

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: its tests run in CI's vLLM job (docs/install.md)")

import torch  # noqa: E402
from tango.common.exceptions import ConfigurationError  # noqa: E402

from benchmarks.end_to_end_generation import GSM8K_TASK, gsm8k_rows, write_jsonl  # noqa: E402
from benchmarks.vllm_generation import KV_CACHE, run_until_results, vllm_distribution_shim  # noqa: E402
from catwalk_steps import PredictStep  # noqa: E402
from catwalk_steps.tasks import LmEvalTask  # noqa: E402

from .conftest import TINY  # noqa: E402
from .tango_runs import OFFLINE, tango_run  # noqa: E402

QUESTIONS = 32
MAX_GEN_TOKS = 48
#: Where two greedy decoders may part: the top two logits closer than float32 rounding of
#: different kernels (vLLM's and transformers') moves them.
NEAR_TIE = 1e-3
ENGINE_ENV = {**KV_CACHE, "TQDM_DISABLE": "1"}  # (our backend must not break under the latter)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny random GPT-2 (data/tiny's tokenizer, a 512-token window, logits spread wide) and a
    GSM8K-shaped lm_eval task on local rows."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("vllm")
    model = root / "model"
    tokenizer = AutoTokenizer.from_pretrained(TINY / "model")
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=512, n_embd=64, n_layer=2, n_head=2,
                                    bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    with torch.no_grad():
        lm.transformer.wte.weight.normal_(0, 0.5)
    lm.save_pretrained(model)
    tokenizer.save_pretrained(model)
    import lm_eval

    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_local.yaml").write_text(GSM8K_TASK.format(
        source=Path(lm_eval.__file__).parent / "tasks/gsm8k/gsm8k.yaml",
        train=write_jsonl(root / "train.jsonl", gsm8k_rows(8, seed=0)),
        test=write_jsonl(root / "test.jsonl", gsm8k_rows(QUESTIONS, seed=1)),
        max_gen_toks=MAX_GEN_TOKS, extra_stops=""))
    return root, model, tasks


def predict_config(model: Path, tasks: Path, backend: str) -> dict:
    task = {"type": "lm_eval", "task": "gsm8k_local", "include_path": str(tasks), "num_shots": 2}
    return {"steps": {
        "predict": {"type": "catwalk::predict", "model": f"rc::{model}", "task": task, "split": "test",
                    "device": "cpu", "backend": backend},
        "metrics": {"type": "catwalk::calculate_metrics", "predictions": {"type": "ref", "ref": "predict"}},
    }}


@pytest.fixture(scope="module")
def ours(setup):
    """`tango run` of predict + metrics with ``backend: "vllm"`` (it must exit: the engine's
    process ends once its journal is written), then with ``"hf"``."""
    from tango.workspaces import LocalWorkspace

    import catwalk_steps  # noqa: F401

    root, model, tasks = setup
    found = {}
    for backend in ("vllm", "hf"):
        config = root / f"{backend}.json"
        config.write_text(json.dumps(predict_config(model, tasks, backend)))
        tango_run(str(config), root / f"workspace-{backend}", backend, "-i", "catwalk_steps", env=ENGINE_ENV)
        workspace = LocalWorkspace(root / f"workspace-{backend}")
        found[backend] = {step: workspace.step_result_for_run(backend, step) for step in ("predict", "metrics")}
    return found


def lm_eval_vllm(root: Path, model: Path, tasks: Path, name: str = "lm_eval"):
    """lm-eval's CLI with ``--model vllm`` (run as benchmarks/vllm_generation.py runs it): its
    per-document samples and its results."""
    out = root / name
    command = [str(Path(sys.executable).with_name("lm_eval")), "--model", "vllm", "--model_args",
               f"pretrained={model},dtype=float32", "--tasks", "gsm8k_local", "--include_path", str(tasks),
               "--output_path", str(out), "--log_samples", "--batch_size", "auto"]
    env = {**os.environ, **OFFLINE, **KV_CACHE, **vllm_distribution_shim(root / "vllm-shim")}
    run_until_results(command, out, root / f"{name}.log", env, timeout=900)
    (samples,) = out.rglob("samples_gsm8k_local_*.jsonl")
    by_doc = {}
    for line in samples.read_text().splitlines():  # one line per document and filter
        row = json.loads(line)
        by_doc.setdefault(row["doc_id"], row)
    (results,) = out.rglob("results_*.json")
    return [by_doc[d] for d in sorted(by_doc)], json.loads(results.read_text())["results"]["gsm8k_local"]


def in_doc_order(records):
    return sorted(records, key=lambda r: int(r["id"].rsplit("/", 1)[1]))


def test_generations_equal_lm_evaluation_harness_s_vllm_model(setup, ours):
    samples, results = lm_eval_vllm(*setup)
    records = in_doc_order(ours["vllm"]["predict"])
    assert len(records) == len(samples) == QUESTIONS
    assert [r["generation"] for r in records] == [s["resps"][0][0] for s in samples]
    for name in ("strict-match", "flexible-extract"):
        assert ours["vllm"]["metrics"][f"exact_match/{name}"] == results[f"exact_match,{name}"]
    assert all(r["margin"] > 0 for r in records)


def first_parting_gap(lm, tokenizer, prompt, other: str, budget: int) -> float:
    """Greedy decoding of ``prompt`` with ``lm``: the gap between the top two logits at the first
    step whose choice leaves ``other``'s text (the other decoder chose otherwise there)."""
    tokens = []
    for _ in range(budget):
        logits = lm(torch.tensor([list(prompt) + tokens])).logits[0, -1].float()
        top = logits.topk(2)
        tokens.append(int(top.indices[0]))
        if not other.startswith(tokenizer.decode(tokens, skip_special_tokens=True)):
            return float(top.values[0] - top.values[1])
    raise AssertionError("the generations do not part within the budget")


@torch.inference_mode()
def test_generations_equal_our_hf_backend_s_but_at_near_ties(setup, ours):
    from catwalk_steps.models.loading import ModelSpec, context_window
    from catwalk_steps.models.weights import load_pretrained

    vllm, hf = (in_doc_order(ours[b]["predict"]) for b in ("vllm", "hf"))
    parted = [(a, b) for a, b in zip(vllm, hf) if a["generation"] != b["generation"]]
    print(f"vllm and hf backends: {len(vllm) - len(parted)} of {len(vllm)} generations equal")
    assert len(parted) <= 0.1 * len(vllm), [(a["generation"], b["generation"]) for a, b in parted]
    spec = ModelSpec.parse(f"rc::{setup[1]}")
    lm, conventions = load_pretrained(spec).eval(), spec.conventions()
    task = LmEvalTask(task="gsm8k_local", include_path=str(setup[2]), num_shots=2)
    prompts = {i.id: conventions.prompt(i.prompt) for i in task.instances("test")}
    window = context_window(lm.config) - MAX_GEN_TOKS
    for ours_vllm, ours_hf in parted:
        gap = first_parting_gap(lm, conventions.tokenizer, prompts[ours_hf["id"]][-window:], ours_vllm["generation"],
                                MAX_GEN_TOKS)
        assert gap < NEAR_TIE


def test_unknown_and_step_set_engine_settings_are_refused_at_graph_build(setup):
    _, model, tasks = setup
    task = LmEvalTask(task="gsm8k_local", include_path=str(tasks), num_shots=2)
    with pytest.raises(ConfigurationError, match="vLLM's engine has no setting gpu_memory"):
        PredictStep(model=f"rc::{model}", task=task, split="test", backend="vllm", vllm_args={"gpu_memory": 0.5})
    with pytest.raises(ConfigurationError, match="max_model_len follow the step's own settings"):
        PredictStep(model=f"rc::{model}", task=task, split="test", backend="vllm", vllm_args={"max_model_len": 128})


@pytest.mark.full
def test_a_fine_tuned_model_generates_as_its_exported_folder_under_lm_eval_s_vllm_model(setup):
    """A cached ``catwalk::finetune`` result through the engine (written as a model folder for it)
    against lm-eval's ``--model vllm`` on the folder ``catwalk::export_model`` writes."""
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import ExportModelStep, FinetuneStep
    from catwalk_steps.tasks import PiqaTask

    root, model, tasks = setup
    piqa = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    finetuned = FinetuneStep(model=f"rc::{model}", tasks=[piqa], batch_size=8, train_limit=32, validation_split=None,
                             learning_rate=1e-2).result(LocalWorkspace(root / "finetune"))
    folder = ExportModelStep(model=None, output_dir=str(root / "exported")).run(
        model=finetuned, output_dir=str(root / "exported"))
    task = LmEvalTask(task="gsm8k_local", include_path=str(tasks), num_shots=2)
    ours = PredictStep(model=finetuned, task=task, split="test", device="cpu", backend="vllm").run(
        model=finetuned, task=task, split="test", device="cpu", backend="vllm")
    samples, _ = lm_eval_vllm(root, Path(folder), tasks, name="lm_eval_finetuned")
    assert [r["generation"] for r in in_doc_order(ours)] == [s["resps"][0][0] for s in samples]
