"""LAMBADA (OpenAI's variant): predict a passage's last word."""

from typing import List, Optional

from .base import Task
from .chat import ChatFormat
from .instance import Row, TargetInstance
from .row_task import RowTask


@Task.register("lambada")
class LambadaTask(RowTask):
    """LAMBADA as lm-evaluation-harness's ``lambada_openai``: the hub's ``EleutherAI/lambada_openai``
    (``default``, its ``test`` split), field ``text``; the context is the passage up to its last
    space, the target a space and the last word. Metrics: ``acc``, the share of passages whose
    last word greedy decoding reproduces token for token, and ``perplexity`` of the target
    (lm-evaluation-harness's ``loglikelihood`` request). Under a chat template the passage is the
    user's turn and the last word follows the assistant's generation prompt, as
    lm-evaluation-harness's ``lambada_openai`` is built under ``--apply_chat_template``."""

    REQUEST_TYPE = "loglikelihood"
    HUB_ID = "EleutherAI/lambada_openai"
    HUB_CONFIG = "default"
    HUB_SPLITS = {"test": "test"}

    def row_instance(self, row: Row, instance_id: str) -> TargetInstance:
        words = row.get("text").split(" ")
        if len(words) < 2 or not words[-1]:
            raise row.error("text", "needs at least two words separated by a space, the last one not empty")
        return TargetInstance(id=instance_id, context=" ".join(words[:-1]), target=" " + words[-1])

    def instances(self, split: str, limit: Optional[int] = None,
                  chat: Optional[ChatFormat] = None) -> List[TargetInstance]:
        instances = super().instances(split, limit)
        return instances if chat is None else [chat.target(instance) for instance in instances]
