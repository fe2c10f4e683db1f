"""The lm_eval task type against lm-evaluation-harness's own requests, and our tasks against
lm-evaluation-harness's definitions of them, on local documents (offline)."""

import pytest
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError

from catwalk_steps.tasks import LmEvalTask, MultipleChoiceTask
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .lm_eval_docs import YAMLS, write_docs, write_yamls


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A directory of task YAMLs pointing lm-evaluation-harness's tasks at local files."""
    directory = tmp_path_factory.mktemp("lm_eval_tasks")
    files = write_docs(directory)
    write_yamls(directory, files)
    return str(directory), files


def bridge(local, name: str, **settings) -> LmEvalTask:
    return LmEvalTask(task=f"local_{name}", include_path=local[0], include_defaults=False, **settings)


def lm_eval_requests(local, name: str, num_shots: int, split_docs: str):
    """lm-evaluation-harness's loglikelihood requests for the task, as its evaluator builds them."""
    task = task_manager(local[0], False).load(f"local_{name}")["tasks"][f"local_{name}"]
    task.set_config("num_fewshot", num_shots)
    task.set_fewshot_seed(1234)
    task.build_all_requests()
    return task, [request.arguments for request in task.instances]


@pytest.mark.parametrize("name", sorted(YAMLS))
@pytest.mark.parametrize("num_shots", [0, 2])
def test_instances_are_lm_evaluation_harness_requests(local, name, num_shots):
    ours = bridge(local, name, num_shots=num_shots)
    split = "test" if name.startswith("mmlu") else "validation"
    instances = ours.instances(split)
    task, requests = lm_eval_requests(local, name, num_shots, split)
    assert [pair for instance in instances for pair in instance.pairs()] == requests
    if num_shots:
        assert instances[0].context.count("\n\n") >= num_shots
    # Gold as lm-evaluation-harness scores it: ranking the gold choice first gets acc 1, another 0.
    for instance, doc in zip(instances, task.eval_docs):
        n = len(instance.continuations)
        best = [(0.0 if i == instance.label else -1.0, False) for i in range(n)]
        worst = [(0.0 if i == (instance.label + 1) % n else -1.0, False) for i in range(n)]
        assert task.process_results(doc, best)["acc"] == 1.0 and task.process_results(doc, worst)["acc"] == 0.0


NATIVE = {  # our task and settings -> lm-evaluation-harness's task (and its split)
    "piqa": ("piqa", {}), "arc_easy": ("arc_easy", {}), "openbookqa": ("openbookqa", {}),
    "hellaswag": ("hellaswag", {}), "winogrande": ("winogrande", {}), "boolq": ("boolq", {}), "sciq": ("sciq", {}),
    "social_iqa": ("social_iqa", {}), "commonsense_qa": ("commonsense_qa", {"formulation": "mc"}),
    "mmlu": ("mmlu", {"subjects": ["abstract_algebra"]}),
    "mmlu_cloze": ("mmlu", {"subjects": ["abstract_algebra"], "formulation": "cloze"}),
}


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_our_tasks_prompt_as_lm_evaluation_harness(local, name):
    """Same pairs scored, same gold, same acc_norm lengths. MMLU also 5-shot: both take the
    first dev rows of the subject. (COPA is left out: lm-evaluation-harness's choices carry
    their own leading space, so its requests have two before each choice; ours have one.)"""
    task_name, settings = NATIVE[name]
    data = local[1][name.removesuffix("_cloze")]
    split = "test" if name.startswith("mmlu") else "validation"
    for shots in ([0, 5] if name.startswith("mmlu") else [0]):
        native = MultipleChoiceTask.by_name(task_name)(data_files=data, num_shots=shots, **settings).instances(split)
        reference = bridge(local, name, num_shots=shots).instances(split)
        assert [i.pairs() for i in native] == [i.pairs() for i in reference]
        assert [i.label for i in native] == [i.label for i in reference]
        if name != "winogrande":  # lm-evaluation-harness divides Winogrande by its options' lengths
            assert [i.answer_lengths() for i in native] == [i.answer_lengths() for i in reference]


def test_cache_key_follows_the_data_and_the_shots(local, tmp_path):
    key = det_hash(bridge(local, "piqa"))
    assert det_hash(bridge(local, "piqa")) == key
    assert det_hash(bridge(local, "piqa", num_shots=2)) != key
    assert det_hash(bridge(local, "boolq")) != key
    with open(local[1]["piqa"]["validation"], "a") as f:
        f.write('{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}\n')
    assert det_hash(bridge(local, "piqa")) != key


def test_from_a_config_and_bad_names_fail_early(local):
    from tango.common import Params

    task = MultipleChoiceTask.from_params(Params({"type": "lm_eval", "task": "local_boolq", "include_path": local[0],
                                                  "include_defaults": False}))
    assert task.splits == ["train", "validation"]
    with pytest.raises(ConfigurationError, match="has no task 'local_bolq' \\(close: local_boolq"):
        bridge(local, "bolq")
    with pytest.raises(ConfigurationError, match="task's own fewshot_split"):
        bridge(local, "piqa", fewshot_split="validation")
    with pytest.raises(ConfigurationError, match="has no test split"):
        bridge(local, "piqa").instances("test")


def test_what_is_not_one_multiple_choice_yaml_task_fails_before_any_data_is_read(tmp_path):
    """The data files named here do not exist: an error about them would mean the bridge built
    the task before refusing it."""
    missing = 'dataset_path: json\ndataset_kwargs: {data_files: {validation: /nonexistent/rows.jsonl}}\n'
    (tmp_path / "mc.yaml").write_text("task: local_mc\noutput_type: multiple_choice\ntag: local_tag\n"
                                      "validation_split: validation\n" + missing)
    (tmp_path / "gen.yaml").write_text("task: local_gen\noutput_type: generate_until\nvalidation_split: validation\n"
                                       + missing)
    (tmp_path / "default.yaml").write_text("task: local_default\nvalidation_split: validation\n" + missing)
    (tmp_path / "py.yaml").write_text("task: local_py\nclass: !function py_task.Task\n")
    (tmp_path / "group.yaml").write_text("group: local_group\ntask: [local_mc]\n")
    expected = {
        "local_group": "'local_group' is a group, not a task",
        "local_tag": "'local_tag' is a tag, not a task",
        "local_default": "'local_default' is not a task of a type we run \\(.*; output_type: unset",
        "local_py": "'local_py' is defined by a Python class",
    }
    for name, message in expected.items():
        with pytest.raises(ConfigurationError, match=message):
            LmEvalTask(task=name, include_path=str(tmp_path), include_defaults=False)
    assert LmEvalTask(task="local_mc", include_path=str(tmp_path), include_defaults=False).splits == ["validation"]
    assert LmEvalTask(task="local_gen", include_path=str(tmp_path), include_defaults=False).REQUEST_TYPE == (
        "generate_until"
    )


def test_each_task_builds_and_owns_its_lm_evaluation_harness_task(local):
    """Built once per task, on first use, and never shared: instances() reseeds it."""
    first, second = bridge(local, "piqa", num_shots=2, fewshot_seed=1), bridge(local, "piqa", num_shots=2)
    assert "harness_task" not in vars(first)  # nothing built by the constructor
    seeded_1 = first.instances("validation")
    assert second.instances("validation") != seeded_1  # other demonstrations, drawn with another seed
    assert first.instances("validation") == seeded_1
    assert first.harness_task is first.harness_task and first.harness_task is not second.harness_task
