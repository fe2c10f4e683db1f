from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("copa")
class CopaTask(MultipleChoiceTask):
    """COPA (Roemmele et al., 2011), as lm-evaluation-harness: the premise without its final
    period, joined by " because" (cause) or " therefore" (effect), then ``" " + choice`` with the
    choice's first letter lower-cased. Hub: a parquet copy of SuperGLUE (the ``super_glue``
    loader is a script)."""

    HUB_ID = "aps/super_glue"
    HUB_CONFIG = "copa"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        connector = {"cause": "because", "effect": "therefore"}
        question = row.get("question")
        if question not in connector:
            raise row.error("question", f"must be 'cause' or 'effect', got {question!r}")

        def lowered(name: str) -> str:
            choice = row.get(name)
            return " " + choice[0].lower() + choice[1:]

        return MCInstance(
            id=instance_id,
            context=f"{row.get('premise').strip()[:-1]} {connector[question]}",
            continuations=[lowered("choice1"), lowered("choice2")],
            label=row.get("label", int),
        )


@MultipleChoiceTask.register("boolq")
class BoolQTask(MultipleChoiceTask):
    """BoolQ (Clark et al., 2019), as lm-evaluation-harness: ``{passage}\\nQuestion: {question}?
    \\nAnswer:`` with continuations `` no`` and `` yes`` (label 1 is yes)."""

    HUB_ID = "aps/super_glue"
    HUB_CONFIG = "boolq"
    UNCONDITIONED_CONTEXT = "Answer:"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        return MCInstance(
            id=instance_id,
            context=f"{row.get('passage')}\nQuestion: {row.get('question')}?\nAnswer:",
            continuations=[" no", " yes"],
            label=row.get("label", int),
        )
