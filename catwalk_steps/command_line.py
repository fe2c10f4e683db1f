"""What ``python -m catwalk_steps.train`` and ``python -m catwalk_steps.evaluate`` share: the
flags of their own (the steps' settings are flags of :mod:`.step_flags`), the tasks and suites they name, and the step graph, built by the same Jsonnet helpers
(``catwalk_steps/configs/lib.libsonnet``, shipped in the package) a config calls, so the steps,
and their cache keys, are the config's: a config run after the command finds everything in the
workspace.

The commands offer the tasks their flags can set up (a registered name, and local files with
``--data_files``) of every kind: multiple choice, generation, perplexity. Tasks that need more
(``template``'s prompt, ``lm_eval``'s task name) are refused with where to write them: a config."""

import argparse
import copy
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tango.common import Params
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

#: The Jsonnet helpers (lib.libsonnet, suites.libsonnet): package data, so every install has them.
CONFIGS = Path(__file__).resolve().parent / "configs"


#: The ``catwalk::predict`` setting the commands give each task themselves (``--split``, or a suite's).
OWN_SETTINGS = ("split",)


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task", action="append", required=True, metavar="NAME",
        help="a registered task (piqa, mmlu, gsm8k, squad, wikitext, lambada, generation, perplexity, ...) or a "
        "suite (core); repeat for several",
    )
    parser.add_argument(
        "--data_files", nargs="+", metavar="SPLIT=PATH", default=[],
        help="local data files of the task (one task only), e.g. train=train.jsonl validation=dev.jsonl",
    )
    parser.add_argument(
        "--split", default=None,
        help="the split to score (default: validation, else test; a suite's own split for each of its tasks)"
    )
    parser.add_argument(
        "--max_new_tokens", type=int, default=None,
        help="the generative tasks' token budget per answer (default: each task's own, 256 for generation)",
    )
    parser.add_argument(
        "--output_dir", default=None,
        help="also write predictions, the table and, for every task but perplexity's, the instances that changed "
        "against the baseline (diffs/) here (default: none)",
    )
    parser.add_argument("-w", "--workspace", default="workspace", help="the Tango workspace (default: workspace)")


def parse_data_files(pairs: Sequence[str]) -> Dict[str, str]:
    files = {}
    for pair in pairs:
        split, sep, path = pair.partition("=")
        if not sep or not split or not path:
            raise ConfigurationError(f"--data_files takes SPLIT=PATH, got {pair!r}")
        if not Path(path).is_file():
            raise ConfigurationError(f"--data_files {split}={path}: no such file")
        files[split] = path
    return files


def offered_tasks() -> Dict[str, str]:
    """``{name: what it needs}`` of every registered task: ``""`` for those the flags set up (no
    setting without a default but ``data_files``), else the settings only a config can give."""
    from .tasks import Task

    offered = {}
    for name in Task.list_available():
        task_class, constructor = Task.resolve_class_name(name)
        init = getattr(task_class, constructor) if constructor else task_class.__init__
        needs = [
            p.name for p in list(inspect.signature(init).parameters.values())[1:]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "data_files"
        ]
        offered[name] = ", ".join(needs)
    return offered


def resolve_tasks(
    names: Sequence[str], data_files: Dict[str, str], max_new_tokens: Optional[int] = None
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """``({name: task config}, {name: split})`` for registered task names and suite names, each
    generative one with ``max_new_tokens`` where given."""
    suites = json.loads(evaluate_jsonnet('import "suites.libsonnet"'))
    offered = offered_tasks()
    tasks: Dict[str, Any] = {}
    splits: Dict[str, str] = {}
    for name in names:
        if name in suites:
            for task, entry in suites[name].items():
                tasks[task] = entry["task"]
                splits[task] = entry.get("split", "validation")
        elif offered.get(name) == "":
            tasks[name] = {"type": name}
        elif name in offered:
            raise ConfigurationError(
                f"Task {name!r} needs settings the flags do not give ({offered[name]}): write a config (README: Configs)"
            )
        else:
            raise ConfigurationError(
                f"Unknown task {name!r}: the tasks are {', '.join(sorted(n for n in offered if not offered[n]))}; "
                f"suites are {', '.join(sorted(suites))}"
            )
    if data_files:
        if len(tasks) != 1:
            raise ConfigurationError(f"--data_files applies to a single task, but {len(tasks)} are named: {', '.join(tasks)}")
        tasks[next(iter(tasks))]["data_files"] = data_files
    if max_new_tokens is not None:
        from .tasks import GenerativeTask, Task

        generative = [name for name, config in tasks.items()
                      if issubclass(Task.resolve_class_name(config["type"])[0], GenerativeTask)]
        if not generative:
            raise ConfigurationError(
                f"--max_new_tokens applies to generative tasks (generation, gsm8k, squad); {', '.join(tasks)} "
                "generate nothing"
            )
        for name in generative:
            tasks[name]["max_new_tokens"] = max_new_tokens
    for name, task in built_tasks({n: c for n, c in tasks.items() if n not in splits}).items():
        splits[name] = evaluation_split(task.splits)
    return tasks, splits


def evaluation_split(splits: Sequence[str]) -> str:
    """The split a task is scored on unless ``--split`` says: validation, else test (WikiText,
    LAMBADA, GSM8K have no validation split), else its last."""
    return next((split for split in ("validation", "test") if split in splits), splits[-1])


def built_tasks(tasks: Dict[str, Any]) -> Dict[str, Any]:
    """The task objects of ``{name: task config}``, built as the steps will build them: a bad
    setting or a missing file is refused before anything runs (no data is read)."""
    from .tasks import Task

    return {name: Task.from_params(Params(copy.deepcopy(config))) for name, config in tasks.items()}


def diffable(tasks: Dict[str, Any]) -> List[str]:
    """The names of the tasks among ``{name: task}`` whose kind has a per-instance 0/1 metric to
    diff (``catwalk::export_diff``): all but perplexity documents."""
    from .kinds import kind_of_task

    return [name for name, task in tasks.items() if kind_of_task(task).diffable]


def evaluate_jsonnet(snippet: str) -> str:
    """Evaluates Jsonnet with the package's helpers (:data:`CONFIGS`) on the import path."""
    import rjsonnet

    return rjsonnet.evaluate_snippet("<command line>", snippet, jpathdir=[str(CONFIGS)])


def lib_call(function: str, *arguments: Any, **named: Any) -> str:
    """A Jsonnet config whose steps are ``lib.<function>(...)`` of these (JSON) values."""
    values = [json.dumps(a) for a in arguments] + [f"{k}={json.dumps(v)}" for k, v in named.items()]
    return f'local lib = import "lib.libsonnet";\n{{ steps: lib.{function}({", ".join(values)}) }}\n'


def run_config(config: str, workspace: str) -> int:
    """Builds the step graph of ``config`` (Jsonnet) and runs it in ``workspace`` as ``tango run``
    does: 0 when every step succeeded, 1 when one failed, 2 for a bad setting."""
    from tango.cli import CliRunError, execute_step_graph, tango_cli
    from tango.workspace import Workspace

    try:
        graph = StepGraph.from_params(Params(json.loads(evaluate_jsonnet(config)))["steps"].as_dict(quiet=True))
    except (ConfigurationError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tango_cli():
        try:
            execute_step_graph(graph, Workspace.from_url(workspace))
        except CliRunError:
            return 1
    return 0


def main_with(build: Callable[[argparse.Namespace], str], parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> int:
    """Parses ``argv``, builds the config (bad flags exit 2 with the reason) and runs it."""
    args = parser.parse_args(argv)
    try:
        config = build(args)
    except ConfigurationError as e:
        parser.error(str(e))
    return run_config(config, args.workspace)
