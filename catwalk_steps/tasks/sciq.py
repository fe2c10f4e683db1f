from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("sciq")
class SciQTask(MultipleChoiceTask):
    """SciQ (Welbl et al., 2017), as lm-evaluation-harness: the support passage (may be empty),
    then ``Question: {question}\\nAnswer:``; choices are the three distractors, then the answer."""

    HUB_ID = "allenai/sciq"
    LABEL_FIELD = "correct_answer"
    UNCONDITIONED_CONTEXT = "Answer:"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        names = ["distractor1", "distractor2", "distractor3", "correct_answer"]
        return MCInstance(
            id=instance_id,
            context=f"{row.text('support').lstrip()}\nQuestion: {row.get('question')}\nAnswer:",
            continuations=[" " + row.get(name) for name in names],
            label=3,
        )
