import re

from .instance import MCInstance, Row
from .task import MultipleChoiceTask


def clean(text: str) -> str:
    """lm-evaluation-harness's HellaSwag preprocessing: WikiHow ``[title]`` markers become
    sentence breaks, other bracketed markers go, double spaces shrink."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


@MultipleChoiceTask.register("hellaswag")
class HellaSwagTask(MultipleChoiceTask):
    """HellaSwag (Zellers et al., 2019): pick the ending of an ActivityNet/WikiHow passage.

    As lm-evaluation-harness: context ``{activity_label}: {ctx_a} {Ctx_b}``, four ``" " + ending``
    continuations, both cleaned with :func:`clean`. The hub test split has no labels.
    """

    HUB_ID = "Rowan/hellaswag"

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        context = f"{row.get('activity_label')}: {row.get('ctx_a')} {row.text('ctx_b').capitalize()}"
        endings = row.get("endings", list)
        # The hub copy writes labels as strings ("0".."3"); local files may use ints.
        if isinstance(row.data.get("label"), str):
            label = row.index_of("label", [str(i) for i in range(len(endings))])
        else:
            label = row.get("label", int)
        return MCInstance(
            id=instance_id,
            context=clean(context),
            continuations=[" " + clean(ending) for ending in endings],
            label=label,
        )
