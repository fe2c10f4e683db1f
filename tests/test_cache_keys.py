"""Cache keys do not change when code moves: a workspace from before a refactoring stays valid.

``tests/data/cache_keys.json`` holds the unique id of every step of every config, recorded
before the package was laid out in folders; a change of any of them (a moved class, a renamed
argument) would make every user recompute that step and what follows it. Bump a step's
``VERSION`` on purpose, and record the new ids, when its output changes. A step that is not
cached (``catwalk::export_diff``) names no cache entry: its id changed once, when its ``metric``
default became the request kind's own. Moved on purpose: the tables' (cw3: their Δ shows the
request kinds' headline metric) and, for the chat demo's BOS-adding model, every step's (its
token conventions' key names how a whitespace-only context is encoded)."""

import json
from pathlib import Path

import pytest
from tango.format import Format
from tango.step_caches import LocalStepCache
from tango.step_graph import StepGraph

from catwalk_steps import AtomicJsonFormat, FinetunedModelFormat, PredictStep
from catwalk_steps.steps.metrics import MetricsTableFormat

from .conftest import REPO, TINY_MODEL

RECORDED = json.loads((Path(__file__).parent / "data" / "cache_keys.json").read_text())


@pytest.mark.parametrize("config", sorted(RECORDED))
def test_every_step_keeps_its_cache_key(config, monkeypatch):
    monkeypatch.chdir(REPO)
    graph = StepGraph.from_file(config)
    assert {name: step.unique_id for name, step in graph.items()} == RECORDED[config]


@pytest.mark.parametrize(
    "path, format_class",
    [
        ("catwalk_steps.weights.FinetunedModelFormat", FinetunedModelFormat),
        ("catwalk_steps.atomic.AtomicJsonFormat", AtomicJsonFormat),
        ("catwalk_steps.metrics.MetricsTableFormat", MetricsTableFormat),
    ],
)
def test_entries_written_before_the_move_are_read_with_our_formats(path, format_class):
    assert Format.resolve_class_name(path)[0] is format_class
    assert Format.resolve_class_name(path)[0] is not None and format_class().to_params()["type"] == path


def test_an_entry_whose_metadata_names_the_old_module_is_a_cache_hit(tmp_path):
    step = PredictStep(model=TINY_MODEL, task=None, step_name="p")
    cache = LocalStepCache(tmp_path)
    entry = cache.step_dir(step)
    entry.mkdir(parents=True)
    (entry / "data.json").write_text(json.dumps([{"id": "x"}]))
    metadata = {"format": {"type": "catwalk_steps.atomic.AtomicJsonFormat"}, "step": step.unique_id}
    (entry / "cache-metadata.json").write_text(json.dumps(metadata))
    assert step in cache and cache[step] == [{"id": "x"}]
