from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("winogrande")
class WinograndeTask(MultipleChoiceTask):
    """Winogrande (Sakaguchi et al., 2019), scored by partial evaluation as in
    lm-evaluation-harness: each option fills the blank in its own context (the sentence up to
    ``_``), and the shared continuation is the rest of the sentence. ``answer`` is "1" or "2"."""

    HUB_ID = "allenai/winogrande"
    HUB_CONFIG = "winogrande_xl"
    LABEL_FIELD = "answer"
    FORMULATIONS = ("cloze",)  # the options change the context: there is no one question to letter

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        sentence = row.get("sentence")
        if sentence.count("_") != 1:
            raise row.error("sentence", f"must contain exactly one '_' blank (got {sentence!r})")
        blank = sentence.index("_")
        rest = " " + sentence[blank + 1:].strip()
        options = [row.get("option1"), row.get("option2")]
        return MCInstance(
            id=instance_id,
            context=sentence[:blank],
            continuations=[rest, rest],
            label=row.index_of("answer", ["1", "2"]),
            choice_contexts=[sentence[:blank] + option for option in options],
        )
