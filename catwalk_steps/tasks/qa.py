"""Question answering by generation: SQuAD v1.1 and TriviaQA, scored with SQuAD's exact match
and F1 (:mod:`.answer_match`), best over the accepted answers, as catwalk scored them."""

from typing import List

from .base import Task
from .generative import GenerativeTask, answer_texts, field_of
from .instance import Row


@Task.register("squad")
class SquadTask(GenerativeTask):
    """SQuAD v1.1 (Rajpurkar et al., 2016; ``rajpurkar/squad``): a Wikipedia paragraph and a
    question whose answer is a span of it. Prompt as lm-evaluation-harness's SQuAD v2 task
    (``Title: ...\\n\\nBackground: ...\\n\\nQuestion: ...\\n\\nAnswer:``), generation until a line
    break, at most 32 tokens. Local files need the hub's fields (``title``, ``context``,
    ``question``, ``answers: {"text": [...]}``)."""

    HUB_ID = "rajpurkar/squad"
    UNTIL = ("\n",)
    MAX_NEW_TOKENS = 32

    def prompt(self, row: Row) -> str:
        return (
            f"Title: {row.text('title')}\n\nBackground: {row.get('context')}\n\n"
            f"Question: {row.get('question')}\n\nAnswer:"
        )

    def references(self, row: Row) -> List[str]:
        return answer_texts(row, "answers.text", field_of(row, "answers", "text"))


@Task.register("triviaqa")
class TriviaQATask(GenerativeTask):
    """TriviaQA (Joshi et al., 2017; ``mandarjoshi/trivia_qa``, config ``rc.nocontext``):
    trivia questions without evidence documents. Prompt and stop strings as
    lm-evaluation-harness's ``triviaqa`` (``Question: {question}?\\nAnswer:``, until a line
    break, full stop or comma); a generation matches if it equals any alias of the answer
    after SQuAD's normalisation. Local files need the hub's fields (``question``,
    ``answer: {"aliases": [...]}``)."""

    HUB_ID = "mandarjoshi/trivia_qa"
    HUB_CONFIG = "rc.nocontext"
    UNTIL = ("\n", ".", ",")

    def prompt(self, row: Row) -> str:
        return f"Question: {row.get('question')}?\nAnswer:"

    def references(self, row: Row) -> List[str]:
        return answer_texts(row, "answer.aliases", field_of(row, "answer", "aliases"))
