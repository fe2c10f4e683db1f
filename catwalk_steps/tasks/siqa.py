from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("social_iqa")
class SocialIQaTask(MultipleChoiceTask):
    """Social IQa (Sap et al., 2019): reasoning about people's motives and reactions.

    Cloze as lm-evaluation-harness's ``social_iqa``: ``Q: {context} {question}\\nA:`` with
    ``" " + answerA/B/C``; ``label`` is "1".."3" (or 1..3). The ``mc`` question is OLMES's
    ``Question: {context} {question}``. Hub: ``lighteval/siqa``, lm-evaluation-harness's copy
    (the original ``social_i_qa`` loader is a script).
    """

    HUB_ID = "lighteval/siqa"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        label = row.data.get("label")
        options = ["1", "2", "3"] if isinstance(label, str) else [1, 2, 3]
        return MCInstance(
            id=instance_id,
            context=f"Q: {row.get('context')} {row.get('question')}\nA:",
            continuations=[" " + row.get(name) for name in ("answerA", "answerB", "answerC")],
            label=row.index_of("label", options),
        )

    def mc_question(self, row: Row, cloze: MCInstance) -> str:
        return f"Question: {row.get('context')} {row.get('question')}"
