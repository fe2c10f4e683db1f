"""Model weights are read and written in one place, ``catwalk_steps.models.weights``: nothing else
touches a weights file or the hub's model files, each load enters it once, and what it loads
equals the model (hub names, local directories, checkpoints under other names, fine-tuned
weights in memory or in a cache file, in float32 and bfloat16)."""

import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, List, Tuple

import pytest
import torch
from safetensors.torch import load_file, save_file

from catwalk_steps.models.finetuned import FinetunedModel
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.rank_classification import RankClassificationModel
from catwalk_steps.models.weights import load_pretrained, load_saved, load_with_weights, save_weights
from catwalk_steps.training.strategies import placed_model

from .conftest import REPO, TINY, TINY_MODEL

PACKAGE = REPO / "catwalk_steps"
WEIGHTS = PACKAGE / "models" / "weights"

#: What reads or writes model weights: safetensors, the hub's downloads, DCP's safetensors reader
#: and writer, and transformers' own loading of a model (a tokenizer's or config's is not).
WEIGHT_IO = re.compile(
    r"\b(from|import) safetensors\b|safe_open|snapshot_download|HuggingFaceStorage(Reader|Writer)"
    r"|(AutoModel\w*|auto_class\([^)]*\))\.from_pretrained"
)


def test_only_the_weights_module_reads_or_writes_weights():
    users = sorted(
        str(path.relative_to(REPO)) for path in PACKAGE.rglob("*.py")
        if WEIGHTS not in path.parents and WEIGHT_IO.search(_code(path))
    )
    assert users == [], users
    inside = {path.name for path in WEIGHTS.glob("*.py") if WEIGHT_IO.search(_code(path))}
    assert inside == {"__init__.py", "files.py", "sharded.py"}  # the pattern finds them where they are


def _code(path: Path) -> str:
    """A module's code without its docstrings and comments (which may name what they do not use)."""
    text = re.sub(r'"""[\s\S]*?"""', "", path.read_text())
    return re.sub(r"#.*", "", text)


@contextmanager
def entries_into_weights() -> Iterator[List[Tuple[str, str]]]:
    """Records each call into ``catwalk_steps.models.weights`` from outside it, as (calling
    module, function): the calls it makes out and back in again (to read a config) are part of
    the same entry."""
    entries: List[Tuple[str, str]] = []
    depth = 0

    def inside(frame) -> bool:
        return frame.f_globals.get("__name__", "").startswith("catwalk_steps.models.weights")

    def profile(frame, event, arg):
        nonlocal depth
        if event == "call" and inside(frame):
            if depth == 0:
                entries.append((frame.f_back.f_globals.get("__name__"), frame.f_code.co_name))
            depth += 1
        elif event == "return" and inside(frame):
            depth -= 1

    sys.setprofile(profile)
    try:
        yield entries
    finally:
        sys.setprofile(None)


def _generator_free(entries):
    return [entry for entry in entries if entry[1] != "<genexpr>"]


def test_a_training_jobs_model_enters_the_weights_module_once():
    spec = ModelSpec.parse(TINY_MODEL)
    job = SimpleNamespace(strategy="ddp", adapter=None, spec=spec,
                          build_model=lambda lm=None: RankClassificationModel(spec, lm=lm))
    with entries_into_weights() as entries:
        model, trained = placed_model(job, 1, torch.device("cpu"))
    assert trained is model
    # The load, then the names that share a tensor, asked of the loaded model (nothing read).
    assert _generator_free(entries) == [
        ("catwalk_steps.models.rank_classification", "load_pretrained"),
        ("catwalk_steps.models.rank_classification", "tied_parameter_names"),
    ]


def test_loading_a_fine_tuned_model_enters_the_weights_module_once(tmp_path):
    spec = ModelSpec.parse(TINY_MODEL)
    state = load_pretrained(spec).state_dict()
    meta = save_weights(state, tmp_path / "model.safetensors")
    in_memory = FinetunedModel(spec, state)
    in_file = FinetunedModel(spec, weights_file=tmp_path / "model.safetensors", weights_meta=meta)
    for finetuned, entry in ((in_memory, "load_with_weights"), (in_file, "load_saved")):
        with entries_into_weights() as entries:
            finetuned.load_model(torch.bfloat16)
        assert _generator_free(entries) == [("catwalk_steps.models.finetuned", entry)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_way_in_gives_the_same_weights(tmp_path, dtype):
    spec = ModelSpec.parse(TINY_MODEL)
    reference = {k: v.to(dtype) for k, v in load_file(str(TINY / "model" / "model.safetensors")).items()}
    meta = save_weights(load_pretrained(spec).state_dict(), tmp_path / "model.safetensors")
    loads = {
        "pretrained": load_pretrained(spec, dtype),
        "in memory": load_with_weights(spec, load_pretrained(spec).state_dict(), dtype),
        "cache file": load_saved(spec, tmp_path / "model.safetensors", meta, dtype),
    }
    for how, lm in loads.items():
        state = lm.state_dict()
        assert {t.dtype for t in state.values()} == {dtype}, how
        assert all(torch.equal(state[name], tensor) for name, tensor in reference.items()), how
        assert lm.lm_head.weight is lm.transformer.wte.weight, how  # tied again
        assert not lm.training, how


def test_a_model_whose_embeddings_are_tied_inside_its_base_loads_every_way(tmp_path):
    """BART ties its encoder's and decoder's embeddings (and its output layer) to one shared
    matrix, which its files hold once: it loaded only where the output layer's tie was listed."""
    from transformers import AutoModelForSeq2SeqLM

    from .tiny_models import tiny_bart

    spec = ModelSpec.parse(f"rc::{tiny_bart(tmp_path / 'bart', TINY / 'model')}")
    reference = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "bart").state_dict()
    meta = save_weights(load_pretrained(spec).state_dict(), tmp_path / "model.safetensors")
    loads = {
        "pretrained": load_pretrained(spec),
        "in memory": load_with_weights(spec, load_pretrained(spec).state_dict()),
        "cache file": load_saved(spec, tmp_path / "model.safetensors", meta),
    }
    for how, lm in loads.items():
        state = lm.state_dict()
        assert state.keys() == reference.keys() and all(torch.equal(state[k], v) for k, v in reference.items()), how
        shared = lm.model.shared.weight
        assert lm.model.encoder.embed_tokens.weight is shared and lm.model.decoder.embed_tokens.weight is shared, how


def test_a_checkpoint_under_the_base_models_names_loads_through_from_pretrained(tmp_path):
    # GPT-2's hub files name the weights without the ``transformer.`` prefix, as do many older
    # checkpoints; a local copy of one (`hf download gpt2 --local-dir gpt2`) must load.
    copy = tmp_path / "base-names"
    shutil.copytree(TINY / "model", copy)
    weights = load_file(str(copy / "model.safetensors"))
    save_file({k.removeprefix("transformer."): v for k, v in weights.items()}, str(copy / "model.safetensors"))
    lm = load_pretrained(ModelSpec.parse(f"rc::{copy}"), torch.bfloat16)
    for name, tensor in weights.items():
        assert torch.equal(lm.state_dict()[name], tensor.to(torch.bfloat16)), name


HUB_LOAD = """
import json, sys, torch
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained
local = load_pretrained(ModelSpec.parse("rc::" + sys.argv[1])).state_dict()
for name in sys.argv[2:]:
    hub = load_pretrained(ModelSpec.parse("rc::" + name)).state_dict()
    print(json.dumps([name, sorted(hub) == sorted(local) and all(torch.equal(hub[k], local[k]) for k in local)]))
"""


def test_a_hub_model_loads_from_the_hf_cache_offline(tmp_path):
    """Hub names resolve through the HF cache as the hub client lays it out (here filled by hand,
    as `hf download` would, since the tests have no network): the safetensors files streamed in,
    or, under other names, through ``from_pretrained``."""
    hub_cache = tmp_path / "hf" / "hub"
    names = {"catwalk-steps-tests/tiny": lambda k: k, "catwalk-steps-tests/tiny-base-names":
             lambda k: k.removeprefix("transformer.")}
    for name, rename in names.items():
        repo = hub_cache / f"models--{name.replace('/', '--')}"
        snapshot = repo / "snapshots" / ("0" * 40)
        shutil.copytree(TINY / "model", snapshot)
        weights = load_file(str(snapshot / "model.safetensors"))
        save_file({rename(k): v for k, v in weights.items()}, str(snapshot / "model.safetensors"))
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0" * 40)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", HUB_LOAD, str(TINY / "model"), *names], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [[name, True] for name in names]
