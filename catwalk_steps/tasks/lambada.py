"""LAMBADA (OpenAI's variant): predict a passage's last word."""

from typing import Any, List, Optional

from .base import Task
from .instance import Row, TargetInstance


@Task.register("lambada")
class LambadaTask(Task):
    """LAMBADA as lm-evaluation-harness's ``lambada_openai``: the hub's ``EleutherAI/lambada_openai``
    (``default``, its ``test`` split), field ``text``; the context is the passage up to its last
    space, the target a space and the last word. Metrics: ``acc``, the share of passages whose
    last word greedy decoding reproduces token for token, and ``perplexity`` of the target
    (lm-evaluation-harness's ``loglikelihood`` request)."""

    REQUEST_TYPE = "loglikelihood"
    VERSION = "1"
    HUB_ID = "EleutherAI/lambada_openai"
    HUB_CONFIG = "default"
    HUB_SPLITS = {"test": "test"}

    def det_hash_object(self) -> Any:
        return (type(self).__name__, self.VERSION, self.data_source())

    def instances(self, split: str, limit: Optional[int] = None) -> List[TargetInstance]:
        rows, source = self.load_rows(split)
        count = len(rows) if limit is None else min(limit, len(rows))
        return [self.instance(Row(rows[n], source, n + 1), f"{split}/{n}") for n in range(count)]

    def instance(self, row: Row, instance_id: str) -> TargetInstance:
        words = row.get("text").split(" ")
        if len(words) < 2 or not words[-1]:
            raise row.error("text", "needs at least two words separated by a space, the last one not empty")
        return TargetInstance(id=instance_id, context=" ".join(words[:-1]), target=" " + words[-1])
