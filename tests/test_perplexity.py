"""Perplexity (rolling log-likelihood of documents) and LAMBADA-style targets: the windows against
lm-evaluation-harness's, the tasks, the metrics, bad input, and the invariance of the numbers to
batch size and worker count."""

import json
import math
import shutil

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, PredictStep
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.models.rolling import rolling_windows
from catwalk_steps.reports.perplexity import document_perplexities, target_metrics
from catwalk_steps.tasks import DataError, LambadaTask, PerplexityTask, Task, WikiTextTask
from catwalk_steps.tasks.perplexity import wikitext_detokenizer

from .conftest import TINY, TINY_MODEL, write_jsonl

DOCUMENTS = TINY / "perplexity" / "documents.jsonl"
WIKITEXT = TINY / "perplexity" / "wikitext_test.jsonl"
LAMBADA = TINY / "perplexity" / "lambada_test.jsonl"
#: Largest relative difference between a document's log-likelihoods scored in different batches.
RELATIVE_TOLERANCE = 1e-5


def documents_task() -> PerplexityTask:
    return PerplexityTask(data_files={"validation": str(DOCUMENTS)})


@pytest.mark.parametrize("length", [1, 2, 5, 63, 64, 65, 127, 128, 129, 300])
@pytest.mark.parametrize("max_length", [1, 3, 64])
def test_windows_are_lm_evaluation_harness_windows(length, max_length):
    utils = pytest.importorskip("lm_eval.utils")
    tokens = list(range(100, 100 + length))
    expected = [
        utils.make_disjoint_window(window)
        for window in utils.get_rolling_token_windows(tokens, prefix_token=7, max_seq_len=max_length, context_len=1)
    ]
    windows = rolling_windows(tokens, 7, max_length)
    assert [(list(w.context), list(w.continuation)) for w in windows] == expected
    # Every token predicted once, in order; every window's input fits the model.
    assert [t for w in windows for t in w.continuation] == tokens
    assert all(len(w.context) + len(w.continuation) - 1 <= max_length for w in windows)


def test_tasks_are_registered_with_their_request_types():
    assert Task.by_name("perplexity") is PerplexityTask and PerplexityTask.REQUEST_TYPE == "loglikelihood_rolling"
    assert Task.by_name("wikitext") is WikiTextTask and WikiTextTask.REQUEST_TYPE == "loglikelihood_rolling"
    assert Task.by_name("lambada") is LambadaTask and LambadaTask.REQUEST_TYPE == "loglikelihood"


def test_documents_count_words_and_bytes_as_lm_evaluation_harness():
    task = pytest.importorskip("lm_eval.api.task")
    documents = documents_task().instances("validation")
    texts = [json.loads(line)["text"] for line in DOCUMENTS.read_text().splitlines()]
    assert [d.text for d in documents] == texts
    assert [d.num_words for d in documents] == [task.Task.count_words(t) for t in texts]
    assert [d.num_bytes for d in documents] == [task.Task.count_bytes(t) for t in texts]


def test_wikitext_reads_detokenised_pages_and_counts_the_original():
    preprocess = pytest.importorskip("lm_eval.tasks.wikitext.preprocess_wikitext")
    pages = [json.loads(line) for line in WIKITEXT.read_text().splitlines()]
    documents = WikiTextTask(data_files={"test": str(WIKITEXT)}).instances("test")
    assert [d.text for d in documents] == [preprocess.wikitext_detokenizer(page) for page in pages]
    assert [d.text for d in documents] == [wikitext_detokenizer(page["page"]) for page in pages]
    assert documents[0].text != pages[0]["page"]  # the detokenizer had work to do
    counts = [preprocess.process_results(page, [0.0]) for page in pages]
    assert [d.num_words for d in documents] == [c["word_perplexity"][1] for c in counts]
    assert [d.num_bytes for d in documents] == [c["byte_perplexity"][1] for c in counts]


def test_lambada_splits_off_the_last_word():
    instances = LambadaTask(data_files={"test": str(LAMBADA)}).instances("test", limit=2)
    assert [(i.context, i.target) for i in instances] == [
        ("To cut the bread, take a sharp", " knife"), ("How do I dry the dishes? Get a clean", " towel")
    ]


@pytest.mark.parametrize("row, problem", [
    ({"txt": "a typo in the field name"}, "field 'text' is missing"),
    ({"text": ""}, "field 'text' is empty"),
    ({"text": "  \n "}, "field 'text' is an empty document"),
    ({"text": ["a", "list"]}, "field 'text' must be a str"),
])
def test_a_bad_document_fails_before_any_model_loads(tmp_path, row, problem):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"text": "A good document."}, row])
    task = PerplexityTask(data_files={"validation": str(path)})
    # A model that does not exist: the data error must come first.
    step = PredictStep(model="rc::no-such-model-anywhere", task=task)
    with pytest.raises(DataError, match=f"{path}: line 2: {problem}"):
        step.run(model="rc::no-such-model-anywhere", task=task)


def test_encoder_decoder_perplexity_is_refused(tmp_path):
    directory = tmp_path / "t5"
    shutil.copytree(TINY / "model", directory)
    (directory / "model.safetensors").unlink()  # refused before any weights are read
    config = {"model_type": "t5", "is_encoder_decoder": True, "vocab_size": 489, "d_model": 16, "num_layers": 1}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigurationError, match="encoder-decoder model: loglikelihood_rolling requests"):
        spec, task = f"rc::{directory}", documents_task()
        PredictStep(model=spec, task=task).run(model=spec, task=task)


def test_metrics_are_lm_evaluation_harness_weighted_perplexities():
    metrics = pytest.importorskip("lm_eval.api.metrics")
    records = [
        {"id": "a", "loglik": -30.0, "num_tokens": 12, "num_words": 5, "num_bytes": 25},
        {"id": "b", "loglik": -71.5, "num_tokens": 20, "num_words": 11, "num_bytes": 60},
    ]
    ours = document_perplexities(records)
    words = [(r["loglik"], r["num_words"]) for r in records]
    bytes_ = [(r["loglik"], r["num_bytes"]) for r in records]
    assert ours["word_perplexity"] == pytest.approx(metrics.weighted_perplexity(words), rel=1e-12)
    assert ours["byte_perplexity"] == pytest.approx(metrics.weighted_perplexity(bytes_), rel=1e-12)
    assert ours["bits_per_byte"] == pytest.approx(metrics.bits_per_byte(bytes_), rel=1e-12)
    assert ours["token_perplexity"] == pytest.approx(math.exp(101.5 / 32), rel=1e-12)
    assert ours["count"] == 2
    targets = target_metrics([{"loglik": -2.0, "is_greedy": True}, {"loglik": -4.0, "is_greedy": False}])
    assert targets["acc"] == 0.5 and targets["perplexity"] == pytest.approx(metrics.perplexity([-2.0, -4.0]))


@pytest.fixture(scope="module")
def by_batch_size(tmp_path_factory):
    """The documents' records at batch sizes 1 and 32, through the cache (each its own workspace)."""
    results = {}
    for size in (1, 32):
        step = PredictStep(model=TINY_MODEL, task=documents_task(), max_batch_size=size, device="cpu",
                           step_name="predict")
        results[size] = step, step.result(LocalWorkspace(tmp_path_factory.mktemp(f"batch-{size}")))
    return results


def assert_same_records(a, b) -> None:
    assert [(r["id"], r["num_tokens"], r["num_words"], r["num_bytes"]) for r in a] == [
        (r["id"], r["num_tokens"], r["num_words"], r["num_bytes"]) for r in b
    ]
    worst = max(abs(x["loglik"] - y["loglik"]) / abs(x["loglik"]) for x, y in zip(a, b))
    print(f"largest relative log-likelihood difference {worst:.1e}")
    assert worst <= RELATIVE_TOLERANCE


def test_records_and_metrics_of_documents(by_batch_size):
    step, records = by_batch_size[1]
    assert step.unique_id == by_batch_size[32][0].unique_id  # batching is not in the key
    assert len(records) == 6 and records[0]["id"] == "validation/0"
    assert max(r["num_tokens"] for r in records) > 64  # some documents need two windows
    assert all(r["loglik"] < 0 for r in records)
    metrics = CalculateMetricsStep(predictions=records).run(predictions=records)
    assert set(metrics) == {"word_perplexity", "byte_perplexity", "token_perplexity", "bits_per_byte", "count", "num_shots"}
    assert metrics["byte_perplexity"] == pytest.approx(2 ** metrics["bits_per_byte"], rel=1e-12)


def test_batch_size_does_not_change_perplexity(by_batch_size):
    assert_same_records(by_batch_size[1][1], by_batch_size[32][1])


@pytest.mark.ddp
@pytest.mark.full  # 2 spawned workers: ~30 s; the worker pool is the one multiple choice tests by default
def test_two_workers_give_the_one_worker_perplexity(by_batch_size, tmp_path):
    step = PredictStep(model=TINY_MODEL, task=documents_task(), device="cpu", device_count=2, step_name="predict")
    assert step.unique_id == by_batch_size[32][0].unique_id
    assert_same_records(by_batch_size[32][1], step.result(LocalWorkspace(tmp_path)))


def test_lambada_targets_greedy_flag_is_the_argmax(tmp_path):
    """is_greedy against a plain forward pass per instance: every target token the argmax."""
    import torch

    task = LambadaTask(data_files={"test": str(LAMBADA)})
    records = {size: PredictStep(model=TINY_MODEL, task=task, split="test", max_batch_size=size).run(
        model=TINY_MODEL, task=task, split="test", max_batch_size=size) for size in (1, 32)}
    assert [r["is_greedy"] for r in records[1]] == [r["is_greedy"] for r in records[32]]
    assert max(abs(a["loglik"] - b["loglik"]) / abs(a["loglik"]) for a, b in zip(records[1], records[32])) <= 1e-5
    spec = ModelSpec.parse(TINY_MODEL)
    tok, lm = spec.load_tokenizer(), load_pretrained(spec, torch.float32).eval()
    for instance, record in zip(task.instances("test"), records[1]):
        context = tok.encode(instance.context)
        target = tok.encode(instance.context + instance.target)[len(context):]
        with torch.no_grad():
            logprobs = lm(torch.tensor([context + target])).logits[0].log_softmax(-1)
        predicted = logprobs[len(context) - 1:-1]
        assert record["num_tokens"] == len(target)
        assert record["loglik"] == pytest.approx(predicted[range(len(target)), target].sum().item(), rel=1e-5)
        assert record["is_greedy"] == (predicted.argmax(-1).tolist() == target)


def test_greedy_flag_holds_for_the_models_own_continuation_only():
    import torch

    from catwalk_steps.models.scoring import Query, score_queries

    spec = ModelSpec.parse(TINY_MODEL)
    tok, lm = spec.load_tokenizer(), load_pretrained(spec, torch.float32).eval()
    context = tuple(tok.encode("To cut the bread, take a sharp"))
    with torch.no_grad():
        best = int(lm(torch.tensor([context])).logits[0, -1].argmax())
        then = int(lm(torch.tensor([context + (best,)])).logits[0, -1].argmax())
    other = (then + 1) % lm.config.vocab_size
    queries = [Query(context, continuation) for continuation in ((best, then), (best, other), (other,), (best,))]
    results = score_queries(lm, queries, pad_token_id=0, max_length=64, max_batch_size=8, max_batch_tokens=4096,
                            greedy=True)
    assert [greedy for _, greedy in results] == [True, False, False, True]
    plain = score_queries(lm, queries, pad_token_id=0, max_length=64, max_batch_size=8, max_batch_tokens=4096)
    assert [loglik for loglik, _ in results] == pytest.approx(plain, rel=1e-5)


def test_tables_and_exports_show_perplexities_beside_accuracies(by_batch_size, tmp_path):
    from catwalk_steps.reports.tables import MetricsTable
    from catwalk_steps.steps.export import ExportPredictionsStep

    _, records = by_batch_size[1]
    perplexities = CalculateMetricsStep(predictions=records).run(predictions=records)
    table = MetricsTable.from_results({"piqa": {"acc": 0.5, "acc_stderr": 0.1, "count": 10}, "documents": perplexities},
                                      ["task"])
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.to_markdown().splitlines()]
    header, piqa, documents = dict(enumerate(rows[0])), rows[2], rows[3]
    cells = {name: (piqa[i], documents[i]) for i, name in header.items()}
    assert cells["acc"] == ("0.5000 ± 0.1000", "")
    assert cells["word_perplexity"] == ("", f"{perplexities['word_perplexity']:.4f}")
    assert cells["bits_per_byte"][0] == "" and cells["count"] == ("10", "6")
    out = ExportPredictionsStep(output_dir=str(tmp_path)).run(
        output_dir=str(tmp_path), predictions={"documents": records}, table=table)
    lines = (tmp_path / "predictions" / "documents.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == records and out == str(tmp_path.resolve())
    assert "word_perplexity" in (tmp_path / "metrics.csv").read_text().splitlines()[0]


def test_a_rerun_resumes_from_the_windows_journaled(by_batch_size, tmp_path, monkeypatch):
    """A killed run's journal (here: its first windows, one of them marked) is read back by the
    rerun, which scores only the rest."""
    step, records = by_batch_size[32]
    monkeypatch.setattr(PredictStep, "clean_work_dir", lambda self, work_dir: None)  # keep the journal
    first = LocalWorkspace(tmp_path / "first")
    step.result(first)
    journal = first.work_dir(step) / "scores-0.jsonl"
    header, *entries = journal.read_text().splitlines()
    window, loglik = json.loads(entries[0])
    kept = [header, json.dumps([window, loglik - 1000.0])] + entries[1:3]
    second = LocalWorkspace(tmp_path / "second")
    (second.work_dir(step) / "scores-0.jsonl").write_text("\n".join(kept) + "\n")
    resumed = step.result(second)
    changed = [(a["loglik"] - b["loglik"]) for a, b in zip(resumed, records) if a["loglik"] != b["loglik"]]
    assert changed == [pytest.approx(-1000.0, abs=1e-3)]  # the marked window came from the journal
    assert len((second.work_dir(step) / "scores-0.jsonl").read_text().splitlines()) == len(entries) + 1
