"""What examples/slurm_sweep.sh asks of the config: the steps of a type, each after the steps it
needs, the fine-tunings each needs, and only those a workspace has not cached."""

import os
import re
import shlex

import pytest
from tango.workspaces import LocalWorkspace

from catwalk_steps import list_steps
from catwalk_steps.list_steps import Job, finetune_job, needed, plan, read, step_names, sweep_name

from .conftest import REPO
from .documented import shown_outputs
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


def test_the_command_prints_each_name_and_refuses_an_unknown_type(capsys):
    list_steps.main([SWEEP, "--type", METRICS])
    lines = capsys.readouterr().out.splitlines()
    assert lines == step_names(read(SWEEP), METRICS) and "metrics_zero_shot_tiny-piqa" in lines
    with pytest.raises(SystemExit):
        list_steps.main([SWEEP, "--type", "catwalk::finetun"])
    assert "no step type 'catwalk::finetun' is registered" in capsys.readouterr().err


# The job plan of examples/slurm_sweep.sh (`--plan WORKSPACE`): the jobs, what each runs on how
# many nodes and which jobs above it it waits for; the shell only submits them.

def jobs_by_key(jobs):
    return {job.key: job for job in jobs}


def test_the_plan_of_a_sweep_nothing_of_which_is_cached(sweep):
    finetunes, metrics = step_names(sweep, FINETUNE), step_names(sweep, METRICS)
    jobs = plan(sweep, set(step_names(sweep)), "my sweep.jsonnet", "/shared/ws")
    assert [job.key for job in jobs[:4]] == finetunes  # each fine-tuning a job, first
    for name in finetunes:
        assert jobs_by_key(jobs)[name] == Job(name, "finetune", 1, "afterok", [], [
            "srun", "--ntasks-per-node=1", "examples/finetune_node.sh", "my sweep.jsonnet", name, "/shared/ws"])
    # then the evaluations of each fine-tuned model, one job after its fine-tuning, and of the stock models
    evaluations = jobs[4:-1]
    assert [job.key for job in evaluations] == [f"evaluate-{name}" for name in finetunes] + ["evaluate-stock"]
    for job in evaluations:
        runs = [name for name in metrics if needed(sweep, name, FINETUNE) == job.waits_for]
        assert len(runs) == (4 if job.key == "evaluate-stock" else 2)
        assert job.command == ["tango", "run", "my sweep.jsonnet", "-w", "/shared/ws", *[a for n in runs for a in ("-s", n)]]
        assert (job.stage, job.nodes, job.after) == ("evaluate", 1, "afterok")
        assert job.waits_for == ([] if job.key == "evaluate-stock" else [job.key.replace("evaluate-", "")])
    # and the table, once every other job has ended, however it ended
    assert jobs[-1] == Job("table", "table", 1, "afterany", [job.key for job in jobs[:-1]],
                           ["examples/sweep_table.sh", "my sweep.jsonnet", "/shared/ws"])


def test_the_plan_submits_only_what_is_not_cached_and_waits_only_for_what_it_submits(sweep):
    first, *others = step_names(sweep, FINETUNE)
    its_metrics = [name for name in step_names(sweep, METRICS) if needed(sweep, name, FINETUNE) == [first]]
    uncached = set(step_names(sweep)) - {first, its_metrics[0], *step_names(sweep, METRICS)[-4:]}
    jobs = jobs_by_key(plan(sweep, uncached, SWEEP, "ws"))
    assert first not in jobs and all(name in jobs for name in others)
    evaluation = jobs[f"evaluate-{first}"]  # its fine-tuning is cached: it starts at once
    assert evaluation.waits_for == [] and evaluation.command[-2:] == ["-s", its_metrics[1]]
    assert "evaluate-stock" not in jobs  # cached, all four
    assert jobs["table"].waits_for == [key for key in jobs if key != "table"]
    nothing_left = plan(sweep, set(), SWEEP, "ws")
    assert nothing_left == [Job("table", "table", 1, "afterany", [], ["examples/sweep_table.sh", SWEEP, "ws"])]


def test_a_fine_tuning_on_n_nodes_is_one_job_of_n_nodes(sweep, tmp_path):
    name = step_names(sweep, FINETUNE)[0]
    config = tmp_path / "nodes.jsonnet"
    config.write_text(f'(import "{REPO / SWEEP}") + {{ steps+: {{ "{name}"+: {{ nodes: 2 }} }} }}\n')
    steps = read(str(config))
    (job,) = [job for job in plan(steps, set(step_names(steps)), str(config), "ws") if job.key == name]
    assert job.nodes == 2 and job.command[:2] == ["srun", "--ntasks-per-node=1"]


def test_a_plan_line_is_what_the_shell_reads_with_one_read():
    job = Job("evaluate-ft", "evaluate", 1, "afterok", ["ft", "ft2"],
              ["tango", "run", "my sweep.jsonnet", "-w", "ws", "-s", "m'1"])
    key, stage, nodes, after, command = job.line().split(" ", 4)
    assert (key, stage, nodes, after) == ("evaluate-ft", "evaluate", "1", "afterok:ft:ft2")
    assert shlex.split(command) == job.command  # sbatch --wrap gives it to sh as it is
    assert Job("table", "table", 1, "afterany", [], ["x"]).line() == "table table 1 - x"


def test_a_sweeps_job_name_is_one_per_config_and_workspace():
    name = sweep_name(SWEEP, "ws")
    assert name.startswith("sweep-sweep_tiny-") and name == sweep_name(str(REPO / SWEEP), str(REPO / "ws"))
    assert name != sweep_name(SWEEP, "other")


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """A stand-in squeue (no Slurm here) that lists the job ids in ``queued``, and records its
    arguments in ``asked``."""
    stand_in = tmp_path / "bin" / "squeue"
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/asked"\ncat "$(dirname "$0")/queued"\n')
    stand_in.chmod(0o755)
    (stand_in.parent / "queued").write_text("")
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    return stand_in.parent


def test_the_command_lists_an_earlier_submissions_jobs_to_cancel(squeue, capsys):
    (squeue / "queued").write_text("12\n7\n12\n")  # an array's tasks share their job's id
    list_steps.main([SWEEP, "--leftovers", "ws"])
    assert capsys.readouterr().out == "7 12\n"
    assert f"--me --noheader --name={sweep_name(SWEEP, 'ws')} --format=%A" in (squeue / "asked").read_text()


def test_the_command_prints_the_sweeps_name_and_its_plan(sweep, squeue, capsys, tmp_path):
    list_steps.main([SWEEP, "--plan", str(tmp_path / "ws")])
    name, *lines = capsys.readouterr().out.splitlines()
    assert name == sweep_name(SWEEP, str(tmp_path / "ws"))
    assert lines == [job.line() for job in plan(sweep, set(step_names(sweep)), SWEEP, str(tmp_path / "ws"))]


def test_the_plan_waits_until_the_cancelled_jobs_have_ended_and_refuses_to_submit_beside_them(squeue, monkeypatch):
    (squeue / "queued").write_text("7\n")
    monkeypatch.setattr(list_steps, "LEFTOVERS_TIMEOUT", 1.5)
    with pytest.raises(SystemExit, match="job 7 of sweep-sweep_tiny-.* still queued after 1.5 s"):
        list_steps.main([SWEEP, "--plan", "ws"])
    assert len((squeue / "asked").read_text().splitlines()) >= 2  # asked again until the timeout


def test_the_command_prints_one_fine_tunings_job_and_refuses_another_step(sweep, capsys):
    name = step_names(sweep, FINETUNE)[0]
    list_steps.main([SWEEP, "--plan", "ws", "--finetuning", name])  # cached or not, no squeue
    assert capsys.readouterr().out.splitlines() == [finetune_job(sweep, name, SWEEP, "ws").line()]
    with pytest.raises(SystemExit):
        list_steps.main([SWEEP, "--plan", "ws", "--finetuning", "table"])
    assert f"{SWEEP} has no catwalk::finetune step 'table'" in capsys.readouterr().err


def test_the_plan_docs_sweeps_md_shows_is_the_plan(sweep):
    (shown,) = shown_outputs("examples/finetune_node.sh configs/sweep_tiny.jsonnet")
    lines = [sweep_name(SWEEP, "/shared/workspace")] + [
        job.line() for job in plan(sweep, set(step_names(sweep)), SWEEP, "/shared/workspace")]
    for line in shown.splitlines():  # "..." stands for what is left out
        if line != "...":
            pattern = ".*".join(re.escape(part) for part in line.split("..."))
            assert any(re.fullmatch(pattern, real) for real in lines), line
