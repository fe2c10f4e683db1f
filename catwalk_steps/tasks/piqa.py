from .task import MCInstance, MultipleChoiceTask


@MultipleChoiceTask.register("piqa")
class PiqaTask(MultipleChoiceTask):
    """PIQA (Bisk et al., 2020): pick the solution that achieves a physical goal.

    Prompt and continuations follow lm-evaluation-harness (``Question: {goal}\\nAnswer:`` with
    ``" " + solution``), so our accuracies are comparable with its numbers. The hub copy is
    lm-evaluation-harness's parquet mirror; the original ``piqa`` loader is a script, which
    ``datasets`` >= 4 no longer runs.
    """

    HUB_ID = "baber/piqa"

    def row_to_instance(self, field, instance_id: str) -> MCInstance:
        return MCInstance(
            id=instance_id,
            context=f"Question: {field('goal')}\nAnswer:",
            continuations=[" " + field("sol1"), " " + field("sol2")],
            label=field("label", int),
        )
