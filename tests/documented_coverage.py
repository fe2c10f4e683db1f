"""Whether every command the pages show was run in this pytest session, and where not, why:
what ``tests/test_docs.py`` checks last (the quick run and ``--full`` each check what they ran).

A command counts as run only when a test of the session ran it (:data:`.documented.COMMANDS_RUN`),
or when ``.ci/run`` runs it (the install and test commands). A command no test of the session
ran is accounted for only where every collected test that would run it (read from the tests'
source: the test function, its fixtures, and the module's functions they name) was skipped, and
that is said with the reasons (``full``, Slurm without root); a test that ran and did not run
it, or no test at all, fails the check."""

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Set, Tuple

from .conftest import REPO
from .documented import CollectedTest, CommandsRun, command_of

RUNNERS = ("documented", "documented_argv", "documented_run")


@dataclass
class Verdict:
    """Where each shown command stands in this session."""

    run: Dict[str, Set[str]] = field(default_factory=dict)  # command: the tests that ran it
    by_ci: List[str] = field(default_factory=list)
    skipped: Dict[str, Dict[str, str]] = field(default_factory=dict)  # command: {test: why skipped}
    not_collected: Dict[str, List[str]] = field(default_factory=dict)  # command: the functions that would run it
    missing: Dict[str, str] = field(default_factory=dict)  # command: why it counts as not run

    def summary(self) -> List[str]:
        lines = [f"{len(self.run)} run by this session's tests, {len(self.by_ci)} by .ci/run"]
        for command, tests in self.skipped.items():
            reasons = {why: [test for test in tests if tests[test] == why] for why in tests.values()}
            said = "; ".join(f"{len(by)} test(s), e.g. {by[0]}: {why}" for why, by in reasons.items())
            lines.append(f"skipped here: {command} ({said})")
        lines += [f"not collected here: {command}" for command in self.not_collected]
        return lines + [f"NOT RUN: {command} ({why})" for command, why in self.missing.items()]


def commands_of_functions(tests: Path = REPO / "tests") -> Dict[Tuple[str, str], Set[str]]:
    """``{(module stem, function name): shown commands}``: the commands each top-level function
    of the tests passes to ``documented``/``documented_argv``/``documented_run`` (a literal, or a
    module constant of the tests), itself or through the functions of its module it names."""
    modules = {path.stem: ast.parse(path.read_text()) for path in sorted(tests.glob("*.py"))}
    constants = {target.id: node.value.value for module in modules.values() for node in module.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 for target in node.targets if isinstance(target, ast.Name)}
    found: Dict[Tuple[str, str], Set[str]] = {}
    for stem, module in modules.items():
        functions = {node.name: node for node in module.body if isinstance(node, ast.FunctionDef)}
        direct = {name: set(_commands_called(node, constants)) for name, node in functions.items()}
        named = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in functions}
                 for name, node in functions.items()}
        for name in functions:
            reached, todo = set(), [name]
            while todo:
                function = todo.pop()
                if function not in reached:
                    reached.add(function)
                    todo += named[function]
            found[(stem, name)] = set().union(*(direct[f] for f in reached))
    return found


def _commands_called(function: ast.FunctionDef, constants: Dict[str, object]) -> Iterable[str]:
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in RUNNERS and node.args:
            argument = node.args[0]
            if isinstance(argument, ast.Constant):
                yield argument.value
            elif isinstance(argument, ast.Name) and argument.id in constants:
                yield constants[argument.id]  # type: ignore[misc]


def ci_commands() -> Set[str]:
    return {command_of(line) for line in (REPO / ".ci" / "run").read_text().splitlines()}


def judge(shown: Iterable[str], commands_run: CommandsRun, functions: Dict[Tuple[str, str], Set[str]],
          ci: Set[str]) -> Verdict:
    """Each shown command: run (by which tests), run by ``.ci/run``, skipped (by which tests,
    why), not collected in this session, or missing (why)."""
    collected = commands_run.collected

    def would_run(test: CollectedTest) -> Set[str]:
        own = functions.get((test.module, test.function), set())
        fixtures = [functions.get((stem, name), set()) for name in test.fixtures for stem in (test.module, "conftest")]
        return own.union(*fixtures)

    expected = {test.node_id: would_run(test) for test in collected}
    anywhere = set().union(*functions.values())
    verdict = Verdict()
    for command in shown:
        runners = [test.node_id for test in collected if command in expected[test.node_id]]
        if command in commands_run.by_command:
            verdict.run[command] = commands_run.by_command[command]
        elif command in ci:
            verdict.by_ci.append(command)
        elif command not in anywhere:
            verdict.missing[command] = "no test runs it"
        elif not runners:
            verdict.not_collected[command] = sorted(f"{m}::{f}" for (m, f), run in functions.items() if command in run)
        elif all(test in commands_run.skipped for test in runners):
            verdict.skipped[command] = {test: commands_run.skipped[test] for test in runners}
        else:
            ran = [test for test in runners if test not in commands_run.skipped]
            verdict.missing[command] = f"its tests ran ({', '.join(ran)}) but none ran it"
    return verdict
