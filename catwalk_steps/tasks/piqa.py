from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("piqa")
class PiqaTask(MultipleChoiceTask):
    """PIQA (Bisk et al., 2020): pick the solution that achieves a physical goal.

    Prompt and continuations follow lm-evaluation-harness (``Question: {goal}\\nAnswer:`` with
    ``" " + solution``), so our accuracies are comparable with its numbers. The hub copy is
    lm-evaluation-harness's parquet mirror; the original ``piqa`` loader is a script, which
    ``datasets`` >= 4 no longer runs.
    """

    HUB_ID = "baber/piqa"
    UNCONDITIONED_CONTEXT = "Answer:"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        return MCInstance(
            id=instance_id,
            context=f"Question: {row.get('goal')}\nAnswer:",
            continuations=[" " + row.get("sol1"), " " + row.get("sol2")],
            label=row.get("label", int),
        )
