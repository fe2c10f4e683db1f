from .instance import MCInstance, Row
from .task import MultipleChoiceTask


class _LetteredChoicesTask(MultipleChoiceTask):
    """Rows with ``choices: {text: [...], label: [...]}`` and an ``answerKey`` among the labels."""

    LABEL_FIELD = "answerKey"

    def question(self, row: Row) -> str:
        raise NotImplementedError

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        choices = row.get("choices", dict)
        texts, labels = choices.get("text") or [], choices.get("label") or []
        if len(texts) < 2 or len(texts) != len(labels):
            raise row.error("choices", f"needs as many texts as labels, at least 2 (got {choices!r})")
        key = row.get("answerKey").strip()
        if key not in labels:
            raise row.error("answerKey", f"must be one of {labels}, got {key!r}")
        return MCInstance(
            id=instance_id,
            context=self.question(row),
            continuations=[" " + text for text in texts],
            label=labels.index(key),
        )


@MultipleChoiceTask.register("arc_easy")
class ArcEasyTask(_LetteredChoicesTask):
    """ARC-Easy (Clark et al., 2018), as lm-evaluation-harness: ``Question: {question}\\nAnswer:``."""

    HUB_ID = "allenai/ai2_arc"
    HUB_CONFIG = "ARC-Easy"
    UNCONDITIONED_CONTEXT = "Answer:"

    def question(self, row: Row) -> str:
        return f"Question: {row.get('question')}\nAnswer:"


@MultipleChoiceTask.register("arc_challenge")
class ArcChallengeTask(ArcEasyTask):
    """ARC-Challenge: the ARC questions that retrieval and co-occurrence methods got wrong."""

    HUB_CONFIG = "ARC-Challenge"


@MultipleChoiceTask.register("openbookqa")
class OpenBookQATask(_LetteredChoicesTask):
    """OpenBookQA (Mihaylov et al., 2018), as lm-evaluation-harness: the bare ``question_stem``
    as context, no ``Question:``/``Answer:`` frame."""

    HUB_ID = "allenai/openbookqa"
    HUB_CONFIG = "main"

    def question(self, row: Row) -> str:
        return row.get("question_stem")


@MultipleChoiceTask.register("commonsense_qa")
class CommonsenseQATask(_LetteredChoicesTask):
    """CommonsenseQA (Talmor et al., 2019): 5-choice questions on ConceptNet relations.

    Cloze: ``Question: {question}\nAnswer:`` and each answer text (as OLMES's cloze form);
    ``mc`` is exactly lm-evaluation-harness's ``commonsense_qa`` (lettered choices, letters
    scored). The hub test split has no answers."""

    HUB_ID = "tau/commonsense_qa"
    UNCONDITIONED_CONTEXT = "Answer:"

    def question(self, row: Row) -> str:
        return f"Question: {row.get('question').strip()}\nAnswer:"
