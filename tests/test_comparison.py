"""Paired comparisons (catwalk::compare), tables with a baseline and seed replicates, per-instance
diffs: the statistics against scipy and the normal approximation, and every refusal."""

import json

import numpy as np
import pytest
from scipy import stats
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

from catwalk_steps import CompareStep, ExportDiffStep, PredictStep, TabulateMetricsStep
from catwalk_steps.reports.comparison import bootstrap_ci, compare_values, holm, mcnemar, permutation_p_value
from catwalk_steps.kinds import Generation, MultipleChoice
from catwalk_steps.reports.diffs import diff_records
from catwalk_steps.reports.pairing import MismatchedPredictions, compare_predictions

CHOICES = MultipleChoice()

from .conftest import REPO, TINY, TINY_MODEL


def records(correct, n_choices=2, seed=0, ids=None, labels=None):
    """Multiple-choice records whose ``acc`` pick is right where ``correct`` is 1."""
    rng = np.random.default_rng(seed)
    out = []
    for n, right in enumerate(correct):
        label = labels[n] if labels else n % n_choices
        logliks = list(-rng.uniform(1, 5, n_choices))
        best = max(logliks) + rng.uniform(0.1, 2)
        pick = label if right else (label + 1) % n_choices
        logliks[pick] = best
        out.append({
            "id": (ids or [f"validation/{i}" for i in range(len(correct))])[n], "label": label, "logliks": logliks,
            "num_tokens": [3] * n_choices, "num_chars": [10] * n_choices, "margin": 0.5,
        })
    return out


@pytest.mark.parametrize("wins, losses, ties", [(7, 2, 30), (0, 5, 10), (12, 12, 1), (1, 0, 0), (40, 25, 100)])
def test_mcnemar_is_scipys_binomial_test_on_the_discordant_pairs(wins, losses, ties):
    baseline = np.array([0] * wins + [1] * losses + [1] * ties)
    candidate = np.array([1] * wins + [0] * losses + [1] * ties)
    assert mcnemar(baseline, candidate) == (wins, losses, stats.binomtest(wins, wins + losses, 0.5).pvalue)


def test_no_discordant_pairs_is_p_one_and_a_zero_interval():
    same = np.array([1, 0, 1, 1, 0])
    c = compare_values("acc", same, same, binary=True)
    assert (c.p_value, c.wins, c.losses, c.delta, c.ci_low, c.ci_high) == (1.0, 0, 0, 0.0, 0.0, 0.0)
    assert permutation_p_value(np.zeros(10)) == 1.0


@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_bootstrap_interval_matches_the_normal_approximation_on_a_large_case(kind):
    rng = np.random.default_rng(7)
    n = 5000
    if kind == "binary":
        baseline = (rng.random(n) < 0.6).astype(float)
        candidate = np.where(rng.random(n) < 0.85, baseline, 1 - baseline)
    else:
        baseline = rng.random(n)
        candidate = baseline + rng.normal(0.01, 0.2, n)
    differences = candidate - baseline
    low, high = bootstrap_ci(differences, seed=3)
    normal = 2 * stats.norm.ppf(0.975) * differences.std(ddof=1) / np.sqrt(n)
    assert abs((high - low) - normal) / normal < 0.10
    assert low < differences.mean() < high


def test_same_inputs_same_interval_other_seed_other_draw():
    rng = np.random.default_rng(1)
    differences = rng.normal(0, 1, 500)
    assert bootstrap_ci(differences, seed=5) == bootstrap_ci(differences, seed=5)
    assert bootstrap_ci(differences, seed=5) != bootstrap_ci(differences, seed=6)


def test_permutation_test_agrees_with_scipy():
    rng = np.random.default_rng(2)
    baseline = rng.random(300)
    candidate = baseline + rng.normal(0.03, 0.3, 300)
    scipy_p = stats.permutation_test(
        (candidate, baseline), lambda c, b, axis: np.mean(c - b, axis=axis), permutation_type="samples",
        vectorized=True, n_resamples=10_000, rng=np.random.default_rng(0),
    ).pvalue
    assert permutation_p_value(candidate - baseline) == pytest.approx(scipy_p, abs=0.02)


def test_holm_on_a_hand_case():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> kept at 0.06)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_every_per_instance_metric_is_compared_with_its_kind():
    baseline, candidate = records([0, 1, 0, 1, 0, 0]), records([1, 1, 1, 1, 0, 1], seed=1)
    result = compare_predictions(CHOICES, baseline, candidate)
    assert result["n"] == 6
    metrics = result["metrics"]
    assert set(metrics) == {"acc", "acc_norm", "acc_per_token", "brier", "gold_loglik"}
    assert metrics["acc"]["test"] == "exact McNemar" and (metrics["acc"]["wins"], metrics["acc"]["losses"]) == (3, 0)
    assert metrics["acc"]["delta"] == pytest.approx(0.5)
    assert metrics["brier"]["test"] == "paired permutation"
    assert CHOICES.values(baseline)["acc"].tolist() == [0, 1, 0, 1, 0, 0]

    def generations(exact, f1):
        return [{"id": r["id"], "generation": "x", "scores": {"exact_match": e, "f1": f}}
                for r, e, f in zip(baseline, exact, f1)]

    f1 = [0.1, 0.5, 0.2, 0.9, 0.0, 0.3]
    metrics = compare_predictions(Generation(), generations([0, 1, 0, 1, 0, 0], f1),
                                  generations([1] * 6, [f + 0.1 for f in f1]))["metrics"]
    assert set(metrics) == {"exact_match", "f1"} and metrics["exact_match"]["wins"] == 4
    assert metrics["f1"]["test"] == "paired permutation" and metrics["f1"]["delta"] == pytest.approx(0.1)


def test_a_kind_says_which_of_its_metrics_are_0_1_and_so_which_test_each_gets():
    """A new request kind is one class: its own 0/1 metric gets the exact McNemar test without a
    name table in the reports to extend (a metric named in no such table was continuous)."""
    from catwalk_steps.kinds import RequestKind

    class Hits(RequestKind):
        name = "hits"

        def values(self, records):
            return {name: np.array([r[name] for r in records], dtype=np.float64) for name in ("hit", "score")}

        def binary(self, metric):
            return metric == "hit"

    baseline = [{"id": n, "hit": hit, "score": hit / 2} for n, hit in enumerate([0, 1, 0, 0, 1, 0])]
    candidate = [{"id": n, "hit": hit, "score": hit / 3} for n, hit in enumerate([1, 1, 1, 0, 1, 1])]
    metrics = compare_predictions(Hits(), baseline, candidate)["metrics"]
    assert metrics["hit"]["test"] == "exact McNemar" and (metrics["hit"]["wins"], metrics["hit"]["losses"]) == (3, 0)
    assert metrics["score"]["test"] == "paired permutation" and "wins" not in metrics["score"]
    assert [Generation().binary(m) for m in ("exact_match", "exact_match/strict-match", "f1", "bleu")] == \
        [True, True, False, False]


@pytest.mark.parametrize(
    "candidate, message",
    [
        (records([1, 1, 1]), "3 candidate instances"),
        (records([1, 1, 1, 1], ids=["a", "b", "c", "d"]), "only in the baseline"),
        (list(reversed(records([1, 1, 1, 1]))), "in another order"),
    ],
)
def test_different_instances_are_refused_naming_what_differs(candidate, message):
    with pytest.raises(MismatchedPredictions, match=message):
        compare_predictions(CHOICES, records([1, 0, 1, 0]), candidate)


def test_a_different_gold_label_is_refused():
    candidate = records([1, 0, 1, 0])
    candidate[2]["label"] = 1
    with pytest.raises(MismatchedPredictions, match="gold label"):
        compare_predictions(CHOICES, records([1, 0, 1, 0]), candidate)


def test_a_binary_metric_with_other_values_is_refused():
    with pytest.raises(ValueError, match="0/1 metric"):
        compare_values("acc", [0, 1, 0.5], [1, 1, 1], binary=True)


def predict(task, **settings):
    return PredictStep(model=TINY_MODEL, task=task, step_name="p", **settings)


def test_comparing_different_evaluations_is_refused_when_the_graph_is_built(tiny_task):
    from catwalk_steps import PiqaTask

    five_shot = PiqaTask(data_files=tiny_task.data_files, num_shots=5)
    cases = [
        (predict(tiny_task, split="train"), "split: 'validation'"),
        (predict(tiny_task, limit=10), "limit"),
        (predict(five_shot), "num_shots"),
        (predict(PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "train.jsonl")})),
         "data files"),
    ]
    for candidate, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            CompareStep(baseline=predict(tiny_task), candidate=candidate)
    same = CompareStep(baseline=predict(tiny_task), candidate=predict(tiny_task, max_batch_size=4))
    other = CompareStep(baseline=predict(tiny_task), candidate=predict(tiny_task, dtype="bfloat16"))
    assert same.unique_id == CompareStep(baseline=predict(tiny_task), candidate=predict(tiny_task)).unique_id
    assert other.unique_id != same.unique_id  # a changed prediction, a new comparison


def test_compare_step_result_is_deterministic():
    baseline, candidate = records([0, 1, 0, 1, 0, 0] * 10), records([1, 1, 1, 1, 0, 1] * 10, seed=3)
    first = CompareStep(baseline=baseline, candidate=candidate, step_name="c").run(baseline, candidate)
    assert first == CompareStep(baseline=baseline, candidate=candidate, step_name="c").run(baseline, candidate)
    json.dumps(first)  # JSON-safe, as the cache stores it


def table_step(names, **settings):
    metrics = {name: {"acc": 0.5, "acc_stderr": 0.1, "count": 4} for name in names}
    return TabulateMetricsStep(metrics=metrics, step_name="t", **settings)


def test_bad_baselines_and_replicates_are_refused_when_the_graph_is_built():
    names = ["piqa/tiny/zero-shot/-", "piqa/tiny/piqa/1", "piqa/tiny/piqa/2"]
    columns = ["task", "model", "finetuned_on", "seed"]
    predictions = {name: [] for name in names}
    with pytest.raises(ConfigurationError, match="baseline 'tiny/lora' is not a row of the table"):
        table_step(names, key_columns=columns, replicates="seed", baseline="tiny/lora", predictions=predictions)
    with pytest.raises(ConfigurationError, match="missing: piqa/tiny/piqa/2"):
        table_step(names, key_columns=columns, baseline="tiny/zero-shot/-",
                   predictions={n: [] for n in names[:2]})
    with pytest.raises(ConfigurationError, match="no setting of the table has more than one seed"):
        table_step(names[:2], key_columns=columns, replicates="seed")
    table_step(names, key_columns=columns, replicates="seed", baseline="tiny/zero-shot", predictions=predictions)


def test_a_table_without_baseline_or_replicates_keeps_its_key():
    names = ["a", "b"]
    assert table_step(names).unique_id == table_step(names, baseline=None, replicates=None, predictions=None).unique_id


def test_table_compares_every_row_with_the_baseline_of_its_task_and_spreads_seeds():
    zero = records([1, 0, 0, 1, 0, 0, 1, 0] * 8)
    seeds = {1: records([1, 1, 0, 1, 1, 0, 1, 1] * 8, seed=1), 2: records([1, 1, 1, 1, 1, 0, 1, 0] * 8, seed=2)}
    from catwalk_steps.reports.accuracy import accuracies  # not metrics_of: torchmetrics is slow to import

    runs = {"piqa/tiny/zero-shot/-": zero, **{f"piqa/tiny/piqa/{s}": r for s, r in seeds.items()}}
    step = TabulateMetricsStep(
        metrics={name: accuracies(r) for name, r in runs.items()}, predictions=runs, step_name="t",
        key_columns=["task", "model", "finetuned_on", "seed"], replicates="seed", baseline="tiny/zero-shot",
    )
    table = step.run(**step.kwargs)
    by_seed = {row["seed"]: row for row in table.rows}
    for s, r in seeds.items():
        expected = compare_predictions(CHOICES, zero, r)["metrics"]["acc"]
        assert by_seed[str(s)]["delta_acc"] == pytest.approx(expected["delta"])
        assert by_seed[str(s)]["p_acc_uncorrected"] == pytest.approx(expected["p_value"])
    raw = [by_seed[s]["p_acc_uncorrected"] for s in ("1", "2")]
    assert [by_seed[s]["p_acc"] for s in ("1", "2")] == pytest.approx(holm(raw))
    mean = by_seed["mean"]
    accs = [by_seed[s]["acc"] for s in ("1", "2")]
    assert mean["acc"] == pytest.approx(np.mean(accs)) and mean["acc_seed_sd"] == pytest.approx(np.std(accs, ddof=1))
    assert (mean["acc_seed_min"], mean["acc_seed_max"], mean["seeds"]) == (min(accs), max(accs), 2)
    assert mean["delta_acc"] == pytest.approx(np.mean([by_seed[s]["delta_acc"] for s in ("1", "2")]))
    markdown = table.to_markdown()
    assert "Δ acc [95% CI]" in markdown and "| p |" in markdown and "Holm-corrected across the table's 2" in markdown
    assert "(seed sd" in markdown and f"(sd {mean['acc_seed_sd']:.4f}" in markdown
    assert "delta_acc_ci_low" in table.to_csv().splitlines()[0]


def generation_records(scores):
    """Generation records of a task with two filters, its scores in the task's order (lm-eval
    lists GSM8K's ``strict-match`` before ``flexible-extract``)."""
    return [
        {"id": f"validation/{n}", "kind": "generate_until", "generation": "4", "references": ["4"], "margin": 1.0,
         "scores": {"exact_match/strict-match": strict, "exact_match/flexible-extract": flexible}}
        for n, (strict, flexible) in enumerate(scores)
    ]


def test_a_tables_delta_and_a_diff_show_the_same_metric(tmp_path):
    """Both show the request kind's ``headline_metric``: the table's Δ showed the first metric by
    name (``flexible-extract``) while the diff listed ``strict-match``."""
    from catwalk_steps.reports.generation import score_averages  # not metrics_of: torchmetrics is slow to import
    from catwalk_steps.steps.metrics import MetricsTableFormat

    runs = {"zero": generation_records([(0, 0), (0, 0), (0, 1), (1, 1)] * 4),
            "tuned": generation_records([(1, 1), (1, 0), (0, 1), (1, 1)] * 4)}
    table = TabulateMetricsStep(metrics={}).run(
        metrics={name: score_averages(r) for name, r in runs.items()}, baseline="zero", predictions=runs)
    assert table.compared_metric() == "exact_match/strict-match"
    assert "Δ exact_match/strict-match [95% CI]" in table.to_markdown()
    assert table.caption.startswith("Δ exact_match/strict-match:")
    (tmp_path / "table").mkdir()
    MetricsTableFormat().write(table, tmp_path / "table")  # as cached
    assert MetricsTableFormat().read(tmp_path / "table").compared_metric() == "exact_match/strict-match"
    ExportDiffStep(output_dir=str(tmp_path), baseline=runs["zero"], candidate=runs["tuned"]).run(
        output_dir=str(tmp_path), baseline=runs["zero"], candidate=runs["tuned"])
    assert "(exact_match/strict-match, 16 instances)" in (tmp_path / "diff.md").read_text()


def test_diff_lists_the_changed_instances_with_prompts(tiny_task, tmp_path):
    instances = tiny_task.instances("validation", 8)
    ids = [i.id for i in instances]
    labels = [i.label for i in instances]
    baseline = records([1, 0, 0, 1, 0, 0, 1, 1], ids=ids, labels=labels)
    candidate = records([1, 1, 0, 0, 1, 0, 1, 1], ids=ids, seed=4, labels=labels)
    diff = diff_records(CHOICES, baseline, candidate, "acc", {i.id: CHOICES.instance_text(i) for i in instances})
    assert (diff["wins"], diff["losses"], diff["ties"]) == (2, 1, 5)
    assert [d["id"] for d in diff["changed"]] == [ids[1], ids[3], ids[4]]
    first = diff["changed"][0]
    assert first["prompt"] == instances[1].context and first["gold"] == first["choices"][instances[1].label]
    assert first["baseline"]["correct"] is False and first["candidate"]["pick_text"] == first["gold"]
    assert len(diff["swings"]) == 8 and abs(diff["swings"][0]["swing"]) >= abs(diff["swings"][-1]["swing"])

    step = ExportDiffStep(output_dir=str(tmp_path), baseline=baseline, candidate=candidate, step_name="d")
    step.run(str(tmp_path), baseline, candidate, task=tiny_task, limit=8)
    assert len((tmp_path / "diff.jsonl").read_text().splitlines()) == 3
    assert "- wins (candidate right, baseline wrong): 2" in (tmp_path / "diff.md").read_text()


def test_command_line_builds_the_configs_steps(monkeypatch, capsys):
    """The flags of the demo's settings build the demo's fine-tuning and prediction steps: a
    config run after the command trains and scores nothing."""
    from catwalk_steps import train
    from catwalk_steps.command_line import evaluate_jsonnet

    monkeypatch.chdir(REPO)
    args = train.parser().parse_args(
        "--model rc::data/tiny/model --task piqa --data_files train=data/tiny/train.jsonl "
        "validation=data/tiny/validation.jsonl --batch_size 16 --micro_batch_size 8 --train_epochs 8 "
        "--learning_rate 1e-3 --unconditioned".split()
    )
    command = StepGraph.from_params(json.loads(evaluate_jsonnet(train.build(args)))["steps"])
    demo = StepGraph.from_file("configs/piqa_tiny.jsonnet")
    for name in ("finetune", "predict_zero_shot", "predict_finetuned", "metrics_zero_shot", "metrics_finetuned"):
        command_name = name if name == "finetune" else name + "_piqa"
        assert command[command_name].unique_id == demo[name].unique_id
    assert "(default: 32)" in train.parser().format_help()  # FinetuneStep's own default

    with pytest.raises(SystemExit):
        train.main(["--model", "rc::x", "--task", "nope"])
    assert "Unknown task 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--model", "rc::x", "--task", "piqa", "--task", "copa", "--data_files", "train=README.md"])
    assert "--data_files applies to a single task, but 2" in capsys.readouterr().err


def test_a_seed_mean_is_charted_with_its_range_and_the_caption_is_kept(tmp_path):
    from catwalk_steps.reports.charts import error_bar
    from catwalk_steps.reports.tables import MetricsTable
    from catwalk_steps.steps.metrics import MetricsTableFormat

    mean = {"acc": 0.6, "acc_seed_min": 0.5, "acc_seed_max": 0.65, "count": 10}
    assert error_bar(mean, "acc") == pytest.approx((0.1, 0.05))
    assert error_bar({"acc": 0.5, "acc_stderr": 0.02}, "acc") == (0.02, 0.02)
    table = MetricsTable(["run", "acc"], [{"run": "a", "acc": 0.5}], "p: Holm-corrected")
    MetricsTableFormat().write(table, tmp_path)
    assert MetricsTableFormat().read(tmp_path) == table and "p: Holm-corrected" in (tmp_path / "table.md").read_text()


def test_evaluate_command_names_models_and_refuses_an_unknown_baseline(monkeypatch, capsys):
    from catwalk_steps import evaluate
    from catwalk_steps.command_line import evaluate_jsonnet

    monkeypatch.chdir(REPO)
    args = evaluate.parser().parse_args(
        ["--model", "rc::data/tiny/model", "--model", "rc::data/tiny/model-small", "--task", "piqa", "--data_files",
         "validation=data/tiny/validation.jsonl", "--baseline", "rc::data/tiny/model"]
    )
    graph = StepGraph.from_params(json.loads(evaluate_jsonnet(evaluate.build(args)))["steps"])
    assert graph["table"].kwargs["baseline"] == "rc::data/tiny/model"
    assert set(graph["table"].kwargs["predictions"]) == {"piqa/rc::data/tiny/model", "piqa/rc::data/tiny/model-small"}
    with pytest.raises(SystemExit):
        evaluate.main(["--model", "rc::a", "--task", "piqa", "--baseline", "rc::b"])
    assert "--baseline 'rc::b' is not one of the --model values" in capsys.readouterr().err


def test_two_settings_with_several_seeds_are_compared_seed_by_seed_beside_their_spread():
    from catwalk_steps.reports.accuracy import accuracies

    runs = {
        f"piqa/{lr}/{seed}": records(pattern, seed=seed)
        for lr, patterns in {"0.001": [[1, 0, 1, 0] * 8, [1, 1, 0, 0] * 8], "0.01": [[1, 1, 1, 0] * 8, [1, 0, 0, 0] * 8]}.items()
        for seed, pattern in zip((1, 2), patterns)
    }
    step = TabulateMetricsStep(
        metrics={name: accuracies(r) for name, r in runs.items()}, predictions=runs, step_name="t",
        key_columns=["task", "lr", "seed"], replicates="seed", baseline="0.001",
    )
    table = step.run(**step.kwargs)
    rows = {(row["lr"], row["seed"]): row for row in table.rows}
    for seed in ("1", "2"):  # seed s of one setting against seed s of the other: the same data order
        expected = compare_predictions(CHOICES, runs[f"piqa/0.001/{seed}"], runs[f"piqa/0.01/{seed}"])["metrics"]["acc"]
        assert rows[("0.01", seed)]["delta_acc"] == pytest.approx(expected["delta"])
    deltas = [rows[("0.01", s)]["delta_acc"] for s in ("1", "2")]  # +0.25 and -0.25
    mean = rows[("0.01", "mean")]
    assert mean["delta_acc"] == pytest.approx(0.0) and mean["seed_sd_of_delta_acc"] == pytest.approx(np.std(deltas, ddof=1))
    assert "≤ seed spread" in table.to_markdown()  # a mean difference within the seeds' spread says so
    assert "delta_acc" not in rows[("0.001", "1")]
