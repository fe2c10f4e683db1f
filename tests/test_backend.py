"""``catwalk::predict``'s ``backend`` setting, checked at graph build in one line whether or not
vLLM is installed, and the default keeping every cache key. (vLLM's generations:
tests/test_vllm.py, in CI's vLLM job.)"""

import importlib.util

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import PredictStep
from catwalk_steps.tasks import LmEvalTask, PiqaTask

from .conftest import TINY_MODEL
from .lm_eval_docs import copy_generation_yamls


def test_an_unknown_backend_is_refused():
    with pytest.raises(ConfigurationError, match="backend must be one of 'hf', 'vllm', got 'vlm'"):
        PredictStep(model=TINY_MODEL, task=PiqaTask(), backend="vlm")


def test_engine_settings_without_the_engine_are_refused():
    with pytest.raises(ConfigurationError, match='vllm_args apply to backend: "vllm" only'):
        PredictStep(model=TINY_MODEL, task=PiqaTask(), vllm_args={"tensor_parallel_size": 2})


def test_loglikelihood_requests_on_vllm_are_refused_naming_the_hf_backend():
    with pytest.raises(ConfigurationError, match='backend "vllm" generates only; PiqaTask makes multiple_choice '
                                                 'requests: use backend "hf"'):
        PredictStep(model=TINY_MODEL, task=PiqaTask(), backend="vllm")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_without_vllm_installed_is_refused_naming_the_install(tmp_path):
    task = LmEvalTask(task="local_gen_qa", include_path=copy_generation_yamls(tmp_path), include_defaults=False)
    with pytest.raises(ConfigurationError, match='backend "vllm" needs vLLM, which is not installed: pip install vllm'):
        PredictStep(model=TINY_MODEL, task=task, backend="vllm")


def test_the_default_backend_keeps_the_cache_key():
    task = PiqaTask()
    assert PredictStep(model=TINY_MODEL, task=task).unique_id == PredictStep(
        model=TINY_MODEL, task=task, backend="hf").unique_id
