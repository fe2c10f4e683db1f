"""A fine-tuned model leaves the cache as a standard ``save_pretrained`` folder
(``catwalk::export_model``): lm-evaluation-harness's own ``simple_evaluate`` with ``--model hf`` on
the folder gives the numbers ``catwalk::predict`` gives on the cached model; a chat fine-tune's
tokenizer keeps the template and special-token setting it was trained with; an adapter's run
writes a peft adapter folder that peft loads onto the base model."""

import json

import pytest
import torch
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, ExportModelStep, FinetuneStep, PredictStep
from catwalk_steps.tasks import LmEvalTask, PiqaTask

from .conftest import TINY, TINY_MODEL

lm_eval = pytest.importorskip("lm_eval")
from .lm_eval_docs import LM_EVAL_TASKS  # noqa: E402  (imports lm_eval)

PIQA = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})


def fine_tuned(tmp_path, model=TINY_MODEL, tasks=(PIQA,), **settings):
    step = FinetuneStep(model=model, tasks=list(tasks), batch_size=8, train_limit=32, validation_split=None,
                        learning_rate=1e-3, **settings)
    return step.result(LocalWorkspace(tmp_path / "ws"))


def test_lm_eval_scores_the_exported_folder_as_we_score_the_cached_model(tmp_path):
    from lm_eval.tasks import TaskManager

    model = fine_tuned(tmp_path)
    folder = ExportModelStep(model=None, output_dir=str(tmp_path / "exported")).run(
        model=model, output_dir=str(tmp_path / "exported"))
    files = {"validation": str(TINY / "validation.jsonl")}
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "piqa_local.yaml").write_text("\n".join([
        "task: local_piqa_export", f"include: {LM_EVAL_TASKS / 'piqa' / 'piqa.yaml'}", "dataset_path: json",
        "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(files)}}}", "training_split: null",
        "test_split: null",
    ]) + "\n")
    theirs = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={folder},dtype=float32", tasks=["local_piqa_export"], limit=24,
        task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False), log_samples=True,
        bootstrap_iters=0, device="cpu", batch_size=8,
    )
    task = LmEvalTask(task="local_piqa_export", include_path=str(tmp_path / "tasks"), include_defaults=False)
    ours = PredictStep(model=TINY_MODEL, task=task, limit=24).run(model=model, task=task, limit=24)
    samples = sorted(theirs["samples"]["local_piqa_export"], key=lambda s: s["doc_id"])
    for record, sample in zip(ours, samples):
        assert record["logliks"] == pytest.approx([r[0][0] for r in sample["resps"]], abs=1e-4)
    metrics = CalculateMetricsStep(predictions=ours).run(predictions=ours)
    assert metrics["acc"] == theirs["results"]["local_piqa_export"]["acc,none"]
    assert {"config.json", "model.safetensors", "generation_config.json"} <= {p.name for p in folder_files(folder)}


def folder_files(folder):
    from pathlib import Path

    return list(Path(folder).iterdir())


@pytest.mark.full
def test_a_chat_fine_tune_leaves_with_its_template_and_special_tokens(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from catwalk_steps.tasks import GenerationTask

    chat = GenerationTask(data_files={"train": str(TINY / "chat" / "train.jsonl")}, until=[], max_new_tokens=4)
    model = fine_tuned(tmp_path, model=f"rc::{TINY / 'chat-model'}", tasks=[chat], apply_chat_template=True)
    folder = ExportModelStep(model=None, output_dir=str(tmp_path / "chat")).run(model=model, output_dir=str(tmp_path / "chat"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    trained = model.spec.conventions().tokenizer
    assert tokenizer.chat_template == trained.chat_template and tokenizer.encode("Hi") == trained.encode("Hi")
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:  # 4.57 keeps the post-processor's BOS (see the README)
        assert tokenizer.encode("Hi")[0] != tokenizer.bos_token_id  # trained without a BOS the template does not write
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    for name, tensor in model.state_dict.items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    # Written again: replaced whole, nothing left beside it.
    ExportModelStep(model=None, output_dir=str(tmp_path / "chat")).run(model=model, output_dir=str(tmp_path / "chat"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat", "ws"]


@pytest.mark.full
def test_an_adapter_leaves_as_a_peft_folder_or_merged(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = fine_tuned(tmp_path, adapter={"type": "lora", "r": 4})
    adapter = ExportModelStep(model=None, output_dir=str(tmp_path / "a")).run(model=model, output_dir=str(tmp_path / "a"))
    merged = ExportModelStep(model=None, output_dir=str(tmp_path / "m")).run(
        model=model, output_dir=str(tmp_path / "m"), merge_adapter=True)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in folder_files(adapter)}
    base = AutoModelForCausalLM.from_pretrained(TINY_MODEL.removeprefix("rc::"))
    with_adapter = PeftModel.from_pretrained(base, adapter).eval()
    plain = AutoModelForCausalLM.from_pretrained(merged).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(with_adapter(ids).logits, plain(ids).logits, atol=1e-5)


@pytest.mark.parametrize("config, message", [
    ({"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": "piqa", "limit": 3},
      "e": {"type": "catwalk::export_model", "model": {"type": "ref", "ref": "p"}, "output_dir": "out"}},
     "ExportModelStep: model must be a catwalk::finetune step's result, and 'p' is a PredictStep: refer to a "
     "fine-tuning step"),
    ({"ft": {"type": "catwalk::finetune", "model": TINY_MODEL, "tasks": ["piqa"]},
      "e": {"type": "catwalk::export_model", "model": {"type": "ref", "ref": "ft"}, "output_dir": "out",
            "merge_adapter": True}},
     "ExportModelStep: merge_adapter merges an adapter into its base model, and 'ft' trains every weight (it has no "
     "adapter): leave merge_adapter unset"),
])
def test_exporting_what_is_not_a_fine_tune_or_merging_no_adapter_is_refused_at_graph_build(config, message):
    """Tango 1.3.2 ran the predictions, then failed in ``write_pretrained_folder`` (``'list' object has no
    attribute 'adapter'``); ``merge_adapter`` on a full fine-tune was ignored."""
    from tango.common.exceptions import ConfigurationError
    from tango.step_graph import StepGraph

    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params(config)
    assert str(error.value) == message
