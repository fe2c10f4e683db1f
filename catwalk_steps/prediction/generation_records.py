"""What ``catwalk::predict`` makes of a generative task: one generation request per instance,
and from the generations one record per instance with the task's scores."""

from typing import Any, Dict, List, Sequence

from tango.common.exceptions import ConfigurationError

from ..models.conventions import TokenConventions
from ..models.generation import GenerationRequest
from ..tasks.generative import GenerativeTask
from ..tasks.instance import GenerationInstance


def generation_requests(
    conventions: TokenConventions, instances: Sequence[GenerationInstance], max_length: int
) -> List[GenerationRequest]:
    """Each instance's prompt as tokens, with its stop strings and budget; a budget that leaves
    no room for a prompt in the model's ``max_length`` tokens is refused before any model loads."""
    budget = max(instance.max_new_tokens for instance in instances)
    if budget >= max_length:
        raise ConfigurationError(
            f"max_new_tokens={budget} leaves no room for a prompt in the model's context window of {max_length} "
            "tokens: lower max_new_tokens"
        )
    return [
        GenerationRequest(conventions.prompt(i.prompt), tuple(i.until), i.max_new_tokens) for i in instances
    ]


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
