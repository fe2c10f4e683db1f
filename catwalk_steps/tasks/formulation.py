"""The multiple-choice ("mc") formulation of a task, beside the cloze one.

Cloze scores each answer text after the question; ``mc`` lists the choices under letters in
the prompt and scores the letters, which is how MMLU is usually run and why current suites
(e.g. OLMES) report both::

    Question: Which gas do plants take in?
    A. oxygen
    B. carbon dioxide
    Answer:

with continuations ``" A"``, ``" B"``. The layout is lm-evaluation-harness's MMLU and
CommonsenseQA prompts'.
"""

from dataclasses import replace

from .instance import MCInstance

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ANSWER_CUE = "Answer:"


def without_answer_cue(context: str) -> str:
    """A cloze context without a closing ``Answer:`` (and the whitespace before it)."""
    return context[: -len(ANSWER_CUE)].rstrip() if context.endswith(ANSWER_CUE) else context.rstrip()


def lettered(cloze: MCInstance, question: str) -> MCInstance:
    """The ``mc`` form of a cloze instance: ``question``, one ``"X. answer"`` line per choice,
    ``Answer:``; the continuations are the letters."""
    if cloze.choice_contexts is not None:
        raise ValueError("An instance whose choices change the context has no lettered form")
    answers = [c[len(cloze.target_delimiter):] for c in cloze.continuations]
    if len(answers) > len(LETTERS):
        raise ValueError(f"{len(answers)} choices are more than there are letters")
    lines = "".join(f"\n{letter}. {answer}" for letter, answer in zip(LETTERS, answers))
    return replace(
        cloze,
        context=f"{question}{lines}\n{ANSWER_CUE}",
        continuations=[" " + letter for letter in LETTERS[: len(answers)]],
        target_delimiter=" ",
    )
