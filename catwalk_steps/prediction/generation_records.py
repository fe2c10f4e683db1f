"""What ``catwalk::predict`` makes of a generative task's generations (its requests are
:func:`..models.prompt_room.generation_requests`): one record per instance with the task's scores."""

from typing import Any, Dict, List, Sequence

from ..models.generation import GenerationRequest
from ..tasks.generative import GenerativeTask
from ..tasks.instance import GenerationInstance


def generation_records(
    task: GenerativeTask,
    instances: Sequence[GenerationInstance],
    requests: Sequence[GenerationRequest],
    generations: Sequence[Dict[str, Any]],
    max_length: int,
) -> List[Dict[str, Any]]:
    """Per instance: its id, the prompt's token count and whether it was cut from the left to fit
    (``truncated``), the generated text, the references, the task's scores and the ``margin``
    (the smallest top-two logit gap over the greedy decisions, :mod:`..models.generation`)."""
    texts = [g["text"] for g in generations]
    records = []
    for instance, request, generation, scores in zip(instances, requests, generations, task.scores(instances, texts)):
        record = {
            "id": instance.id,
            "num_prompt_tokens": len(request.prompt),
            "truncated": len(request.window(max_length)) < len(request.prompt),
            "generation": generation["text"],
            "references": list(instance.references),
            "scores": scores,
            "margin": generation["margin"],
        }
        if instance.group is not None:
            record["group"] = instance.group
        records.append(record)
    return records
