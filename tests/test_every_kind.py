"""Every request kind through the steps that judge predictions, on records ``catwalk::predict``
makes (not built by hand): multiple choice, generation (a native task, and an lm_eval task whose
scores are named by filter), perplexity documents, LAMBADA-style targets and preference pairs
(against a reference model), each through
``catwalk::compare``, a table with a baseline (Δ and p, with the test each metric gets) and, for
the per-instance 0/1 metrics, ``catwalk::export_diff``."""

import json

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import CalculateMetricsStep, CompareStep, ExportDiffStep, PredictStep, TabulateMetricsStep
from catwalk_steps.tasks import GenerationTask, LambadaTask, LmEvalTask, PerplexityTask, PiqaTask, PreferenceTask

from .conftest import TINY, TINY_MODEL, write_jsonl

SMALL_MODEL = f"rc::{TINY / 'model-small'}"
PERPLEXITY = TINY / "perplexity"


def tasks(tmp_path_factory):
    from .lm_eval_docs import copy_generation_yamls

    yamls = copy_generation_yamls(tmp_path_factory.mktemp("every_kind"))
    return {
        "multiple choice": (PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")}), "validation", "acc"),
        "generation": (GenerationTask(data_files={"validation": str(TINY / "generation" / "validation.jsonl")},
                                      until=["\n"], max_new_tokens=6), "validation", "exact_match"),
        "lm_eval generation": (LmEvalTask(task="local_gen_arith", include_path=yamls, include_defaults=False,
                                          num_shots=0), "validation", "exact_match/strict-match"),
        "documents": (PerplexityTask(data_files={"validation": str(PERPLEXITY / "documents.jsonl")}), "validation",
                      "loglik"),
        "targets": (LambadaTask(data_files={"test": str(PERPLEXITY / "lambada_test.jsonl")}), "test", "acc"),
        "preference": (PreferenceTask(data_files={"validation": str(preference_pairs(tmp_path_factory))}),
                       "validation", "pair_acc"),
    }


def preference_pairs(tmp_path_factory):
    """Sixteen pairs: a question, a right answer and a wrong one."""
    rows = [{"prompt": f"Question: what is {n} plus {n}?\nAnswer:", "chosen": f" {2 * n}", "rejected": f" {n + 3}"}
            for n in range(16)]
    return write_jsonl(tmp_path_factory.mktemp("preference") / "validation.jsonl", rows)


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """Each kind's records from two models, as ``catwalk::predict`` makes them."""
    pytest.importorskip("lm_eval")
    found = {}
    for kind, (task, split, metric) in tasks(tmp_path_factory).items():
        reference = {"reference_model": TINY_MODEL} if kind == "preference" else {}
        runs = [PredictStep(model=m, task=task, split=split, limit=16, **reference).run(
                    model=m, task=task, split=split, limit=16, **reference)
                for m in (TINY_MODEL, SMALL_MODEL)]
        found[kind] = task, split, metric, runs
    return found


KINDS = ["multiple choice", "generation", "lm_eval generation", "documents", "targets", "preference"]


@pytest.mark.parametrize("kind", KINDS)
def test_compare_and_a_table_with_a_baseline_take_every_kind(predicted, kind):
    task, split, metric, (baseline, candidate) = predicted[kind]
    compared = CompareStep(baseline=baseline, candidate=candidate).run(baseline=baseline, candidate=candidate)
    assert metric in compared["metrics"]
    expected_test = "exact McNemar" if metric in ("acc", "exact_match", "exact_match/strict-match", "pair_acc") \
        else "paired permutation"
    assert compared["metrics"][metric]["test"] == expected_test
    metrics = {name: CalculateMetricsStep(predictions=r).run(predictions=r) for name, r in
               (("big", baseline), ("small", candidate))}
    table = TabulateMetricsStep(metrics={}).run(
        metrics=metrics, baseline="big", predictions={"big": baseline, "small": candidate})
    (small,) = [row for row in table.rows if row["run"] == "small"]
    assert f"delta_{metric}" in small and 0 <= small[f"p_{metric}"] <= 1
    assert expected_test in table.caption or f"delta_{metric}" not in table.display_columns()
    # The Δ shown is the metric a diff lists by default (documents have none: no 0/1 metric).
    assert table.compared_metric() == (None if kind == "documents" else metric)


def with_changes(kind: str, metric: str, records):
    """``records`` with the 0/1 ``metric`` of every other instance flipped, so that a diff has
    wins and losses to list: the two tiny models agree on every generation and target. (Multiple
    choice and preference pairs keep their own: their correctness is read from the log-likelihoods,
    which differ.)"""
    if kind in ("multiple choice", "preference"):
        return records
    changed = []
    for n, record in enumerate(records):
        if n % 2 == 0 and "scores" in record:
            record = {**record, "scores": {**record["scores"], metric: 1 - record["scores"][metric]}}
        elif n % 2 == 0:
            record = {**record, "is_greedy": not record["is_greedy"]}
        changed.append(record)
    return changed


@pytest.mark.parametrize("kind", ["multiple choice", "generation", "lm_eval generation", "targets", "preference"])
def test_diffs_list_the_changed_instances_of_every_kind_with_a_0_1_metric(predicted, kind, tmp_path):
    task, split, metric, (baseline, candidate) = predicted[kind]
    candidate = with_changes(kind, metric, candidate)
    step = ExportDiffStep(output_dir=str(tmp_path), baseline=baseline, candidate=candidate, metric=metric,
                          task=task, split=split, limit=16)
    out = step.run(output_dir=str(tmp_path), baseline=baseline, candidate=candidate, metric=metric, task=task,
                   split=split, limit=16)
    changed = [json.loads(line) for line in (tmp_path / "diff.jsonl").read_text().splitlines()]
    summary = (tmp_path / "diff.md").read_text()
    assert out == str(tmp_path) and f"({metric}, {len(baseline)} instances)" in summary
    assert changed and all(entry["change"] in ("win", "loss") for entry in changed)


@pytest.mark.parametrize("kind", KINDS)
def test_records_say_their_kind_and_records_cached_before_are_recognised(predicted, kind):
    from catwalk_steps.kinds import kind_of_records, kind_of_task

    task, split, metric, (baseline, _) = predicted[kind]
    assert {r["kind"] for r in baseline} == {task.REQUEST_TYPE}
    before = [{k: v for k, v in r.items() if k != "kind"} for r in baseline]  # as cached before records said it
    assert kind_of_records(before) is kind_of_records(baseline) is kind_of_task(task)
    assert CalculateMetricsStep(predictions=before).run(predictions=before) == \
        CalculateMetricsStep(predictions=baseline).run(predictions=baseline)


def test_predictions_of_two_kinds_are_refused(predicted):
    choices, documents = predicted["multiple choice"][3][0], predicted["documents"][3][0]
    with pytest.raises(ValueError, match="one kind expected, got loglikelihood_rolling and multiple_choice"):
        CompareStep(baseline=choices, candidate=documents).run(baseline=choices, candidate=documents)


@pytest.mark.parametrize("kind", KINDS)
def test_seed_replicates_spread_and_compare_every_kind(predicted, kind):
    """Two seeds of a setting (here two models' records standing in for them) against a baseline:
    the mean row spreads every metric, and the seeds' deltas spread too."""
    task, split, metric, (baseline, candidate) = predicted[kind]
    runs = {"zero/1": baseline, "tuned/1": baseline, "tuned/2": candidate}
    metrics = {name: CalculateMetricsStep(predictions=r).run(predictions=r) for name, r in runs.items()}
    step = TabulateMetricsStep(metrics=metrics, predictions=runs, key_columns=["run", "seed"], replicates="seed",
                               baseline="zero")
    table = step.run(**step.kwargs)
    (mean,) = [row for row in table.rows if row["seed"] == "mean"]
    shown = {"loglik": "word_perplexity"}.get(metric, metric)  # documents' table metric; loglik is per instance
    values = [metrics[f"tuned/{s}"][shown] for s in (1, 2)]
    assert mean[shown] == pytest.approx(sum(values) / 2) and mean["seeds"] == 2
    assert mean[f"{shown}_seed_sd"] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5)
    assert f"seed_sd_of_delta_{metric}" in mean


@pytest.mark.parametrize("kind", ["multiple choice", "generation", "lm_eval generation", "targets", "preference"])
def test_a_diff_without_a_metric_takes_the_kinds_own(predicted, kind, tmp_path):
    task, split, metric, (baseline, candidate) = predicted[kind]
    candidate = with_changes(kind, metric, candidate)
    ExportDiffStep(output_dir=str(tmp_path), baseline=baseline, candidate=candidate).run(
        output_dir=str(tmp_path), baseline=baseline, candidate=candidate, task=task, split=split, limit=16)
    assert f"({metric}, {len(baseline)} instances)" in (tmp_path / "diff.md").read_text()
    changed = [json.loads(line) for line in (tmp_path / "diff.jsonl").read_text().splitlines()]
    assert changed and all(entry["prompt"] and "kind" not in entry["baseline"] for entry in changed)


def test_documents_have_nothing_to_diff_and_the_command_line_diffs_every_other_kind(predicted, tmp_path):
    from catwalk_steps.command_line import diffable

    baseline, candidate = predicted["documents"][3]
    with pytest.raises(ValueError, match="loglikelihood_rolling predictions have no per-instance 0/1 metric"):
        ExportDiffStep(output_dir=str(tmp_path), baseline=baseline, candidate=candidate).run(
            output_dir=str(tmp_path), baseline=baseline, candidate=candidate)
    tasks = {kind: found[0] for kind, found in predicted.items()}
    assert diffable(tasks) == ["multiple choice", "generation", "lm_eval generation", "targets", "preference"]


@pytest.mark.parametrize("kind", KINDS)
def test_exported_predictions_are_each_kinds_records(predicted, kind):
    from catwalk_steps.steps.export import readable_predictions

    records = predicted[kind][3][0]
    readable = list(readable_predictions(records))
    assert [r["id"] for r in readable] == [r["id"] for r in records]
    assert all(("correct" in r) == (kind == "multiple choice") for r in readable)


def test_a_new_kind_is_one_class_that_every_judging_step_asks():
    """A kind registered from outside (here: a count per instance) is recognised by its field in
    records cached without ``kind``, and gets metrics, comparisons and exports without another
    change, and says itself whether chat templates apply to its tasks; a record of no kind is
    refused naming its fields."""
    import numpy as np

    from catwalk_steps.kinds import KINDS, RequestKind, conversational_kinds, kind_of_record
    from catwalk_steps.kinds.base import register
    from catwalk_steps.steps.export import readable_predictions
    from catwalk_steps.tasks.chat import check_chat_settings

    class Counts(RequestKind):
        name, journal, description, record_field, diffable = "count", "counts", "Counts", "count", False

        def metrics(self, records):
            return {"mean_count": sum(r["count"] for r in records) / len(records), "count": len(records)}

        def values(self, records):
            return {"count": np.array([r["count"] for r in records], dtype=np.float64)}

        def binary(self, metric):
            return False  # a count: the paired permutation test

    register(Counts())
    try:
        baseline = [{"id": str(n), "count": n} for n in range(8)]
        candidate = [{"id": str(n), "count": n + 1, "kind": "count"} for n in range(8)]
        assert CalculateMetricsStep(predictions=baseline).run(predictions=baseline)["mean_count"] == 3.5
        compared = CompareStep(baseline=baseline, candidate=candidate).run(baseline=baseline, candidate=candidate)
        assert compared["metrics"]["count"]["delta"] == 1.0
        assert compared["metrics"]["count"]["test"] == "paired permutation"
        assert list(readable_predictions(candidate)) == candidate

        class CountTask:
            REQUEST_TYPE = "count"

        # Whether its prompts can be conversations is the kind's to say (no list of names to extend).
        with pytest.raises(ConfigurationError, match="CountTask makes count requests, which have no prompt to put"):
            check_chat_settings({"apply_chat_template": True}, [CountTask()], conversational_kinds())
        Counts.conversational = True
        check_chat_settings({"apply_chat_template": True}, [CountTask()], conversational_kinds())
    finally:
        del KINDS["count"]
    with pytest.raises(ValueError, match="Not a catwalk::predict record of any one kind .*: count, id"):
        kind_of_record(baseline[0])


def test_a_diff_of_perplexity_predictions_is_refused_when_the_graph_is_built(tmp_path):
    documents = PerplexityTask(data_files={"validation": str(PERPLEXITY / "documents.jsonl")})
    baseline, candidate = (PredictStep(model=m, task=documents, limit=4) for m in (TINY_MODEL, SMALL_MODEL))
    with pytest.raises(ConfigurationError, match="predictions \\(loglikelihood_rolling\\) have none: compare them"):
        ExportDiffStep(output_dir=str(tmp_path), baseline=baseline, candidate=candidate)
