"""GSM8K as lm-evaluation-harness's default ``gsm8k`` task: its prompt, 5 demonstrations, stop
strings, both of its answer filters and its exact match, computed by its own filter and metric
functions (so lm-evaluation-harness must be installed to score it)."""

import importlib.util
from typing import Any, Dict, List, Sequence, Tuple

from tango.common.exceptions import ConfigurationError

from .base import Task
from .generative import GenerativeTask
from .instance import GenerationInstance, Row

#: lm-evaluation-harness's ``gsm8k.yaml`` filter_list: the answer after "#### ", and the last
#: number in the text.
FILTERS: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {
    "strict-match": [("regex", {"regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}), ("take_first", {})],
    "flexible-extract": [
        ("regex", {"group_select": -1, "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"}),
        ("take_first", {}),
    ],
}
#: Its exact_match settings: the reference's reasoning (up to "#### "), commas, dollar signs and
#: a final full stop ignored, and case.
EXACT_MATCH: Dict[str, Any] = {
    "ignore_case": True, "ignore_punctuation": False, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]
}


@Task.register("gsm8k")
class Gsm8kTask(GenerativeTask):
    """GSM8K (Cobbe et al., 2021; ``openai/gsm8k``, config ``main``): grade-school maths word
    problems, answered with reasoning that ends in ``#### <number>``.

    Prompt ``Question: {question}\\nAnswer:``, 5 solved training problems before it (drawn by
    our seeded sampler, :mod:`.fewshot`, so which five differs from lm-evaluation-harness's
    draw), generation until ``Question:``, ``</s>`` or ``<|im_end|>``. Metrics
    ``exact_match/strict-match`` and ``exact_match/flexible-extract``, lm-evaluation-harness's
    ``exact_match,strict-match`` and ``exact_match,flexible-extract``. Splits ``train`` and
    ``test``; local files need the hub's fields (``question``, ``answer``).
    """

    HUB_ID = "openai/gsm8k"
    HUB_CONFIG = "main"
    HUB_SPLITS = {"train": "train", "test": "test"}
    UNTIL = ("Question:", "</s>", "<|im_end|>")
    DEFAULT_SHOTS = 5
    METRICS = tuple(f"exact_match/{name}" for name in FILTERS)

    def __init__(self, **kwargs: Any) -> None:
        if importlib.util.find_spec("lm_eval") is None:
            raise ConfigurationError(
                'gsm8k is scored by lm-evaluation-harness\'s own filters and exact match: pip install -e ".[lm_eval]"'
            )
        super().__init__(**kwargs)

    def prompt(self, row: Row) -> str:
        return f"Question: {row.get('question')}\nAnswer:"

    def references(self, row: Row) -> List[str]:
        return [row.get("answer")]

    def scores(self, instances: Sequence[GenerationInstance], generations: Sequence[str]) -> List[Dict[str, float]]:
        from lm_eval.api.metrics import exact_match_hf_evaluate
        from lm_eval.filters import build_filter_ensemble

        scores: List[Dict[str, float]] = [{} for _ in instances]
        for name, steps in FILTERS.items():
            responses: Any = [[text] for text in generations]
            for make_filter in build_filter_ensemble(name, steps).filters:
                responses = list(make_filter().apply(responses, [{}] * len(instances)))
            for score, instance, answer in zip(scores, instances, responses):
                found = exact_match_hf_evaluate([answer], [instance.references[0]], **EXACT_MATCH)
                score[f"exact_match/{name}"] = float(found["exact_match"])
        return scores
