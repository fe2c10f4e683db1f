"""What examples/slurm_sweep.sh asks of the config: the steps of a type, each after the steps it
needs, the fine-tunings each needs, and only those a workspace has not cached."""

import pytest
from tango.workspaces import LocalWorkspace

from catwalk_steps import list_steps
from catwalk_steps.list_steps import needed, read, step_names

from .tango_runs import SWEEP

FINETUNE, METRICS = "catwalk::finetune", "catwalk::calculate_metrics"


@pytest.fixture(scope="module")
def sweep():
    return read(SWEEP)


def test_metrics_steps_come_after_the_fine_tunings_they_need_and_name_them(sweep):
    order = step_names(sweep)
    metrics = step_names(sweep, METRICS)
    assert len(metrics) == 12 and len(step_names(sweep, FINETUNE)) == 4
    for name in metrics:
        (finetune,) = needed(sweep, name, FINETUNE) or [None]
        if "zero_shot" in name:
            assert finetune is None
        else:  # metrics_tiny-piqa-seed1-lr0.003-tools needs finetune_tiny-piqa-seed1-lr0.003
            assert name.startswith(finetune.replace("finetune_", "metrics_") + "-")
            assert order.index(finetune) < order.index(name)


def test_a_cached_step_is_left_out(sweep, tmp_path):
    first = step_names(sweep, METRICS)[0]
    (step,) = [step for step in sweep.ordered if step.name == first]
    LocalWorkspace(tmp_path).step_cache[step] = {"acc": 1.0}  # as if computed
    assert step_names(sweep, METRICS, uncached_in=str(tmp_path)) == step_names(sweep, METRICS)[1:]


def test_the_command_prints_each_name_with_what_it_needs_and_refuses_an_unknown_type(capsys):
    list_steps.main([SWEEP, "--type", METRICS, "--needs", FINETUNE])
    lines = capsys.readouterr().out.splitlines()
    assert "metrics_tiny-piqa-seed1-lr0.003-piqa finetune_tiny-piqa-seed1-lr0.003" in lines
    assert "metrics_zero_shot_tiny-piqa" in lines and len(lines) == 12
    with pytest.raises(SystemExit):
        list_steps.main([SWEEP, "--type", "catwalk::finetun"])
    assert "no step type 'catwalk::finetun' is registered" in capsys.readouterr().err
