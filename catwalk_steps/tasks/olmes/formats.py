"""How OLMES v0.1 writes each core task's rows as prompts, in its two formulations (Gu et al.,
2024, "OLMES: A Standard for Language Model Evaluations"):

- ``rc`` (cloze): the question, ``Answer:``, and each answer text scored after it;
- ``mc``: the question, one ``" A. answer"`` line per choice (a space before each letter, so the
  letter scored is the same token as in the prompt), ``Answer:``, and the letters scored.

Every continuation starts with a space that belongs to it: OLMES's ``acc_per_char`` divides by
the continuation's whole length, that space included, so instances have no target delimiter
(``target_delimiter=""``, :class:`~..instance.MCInstance`). A row here is one of the dataset
OLMES names, in that dataset's fields (the curated shots are such rows too).
"""

import re
from typing import List, Optional, Sequence, Tuple

from ..formulation import ANSWER_CUE, LETTERS
from ..instance import MCInstance, Row

#: (question, answer texts, gold index): what a row is to every format but WinoGrande's cloze.
Question = Tuple[str, List[str], int]


def cloze_prompt(question: str, question_prefix: str = "Question: ") -> str:
    return f"{question_prefix}{question}\n{ANSWER_CUE}"


def lettered_prompt(question: str, answers: Sequence[str], question_prefix: str = "Question: ",
                    choices_prefix: str = "") -> str:
    lines = "\n".join(f" {letter}. {answer}" for letter, answer in zip(LETTERS, answers))
    return f"{question_prefix}{question}\n{choices_prefix}{lines}\n{ANSWER_CUE}"


def letters(count: int) -> List[str]:
    return [" " + letter for letter in LETTERS[:count]]


class TaskFormat:
    """One core task: its dataset, where a row's native id is, and how a row becomes an
    instance in either formulation. Most tasks only say :meth:`question` and the prefixes."""

    #: The hub dataset (path, config) OLMES reads, its splits, and the key of its curated shots.
    dataset: Tuple[str, Optional[str]]
    splits: Tuple[str, ...] = ("train", "validation")
    shots: str
    #: The row field holding OLMES's ``native_id``; None, or a row without it (local files
    #: need not carry ids): the row's position in the split.
    native_id_field: Optional[str] = "id"
    question_prefix = "Question: "
    choices_prefix = ""

    def question(self, row: Row) -> Question:
        raise NotImplementedError

    def native_id(self, row: Row, index: int) -> str:
        return str(row.data.get(self.native_id_field, index) if self.native_id_field else index)

    def rc(self, row: Row, instance_id: str) -> MCInstance:
        question, answers, gold = self.question(row)
        return MCInstance(instance_id, cloze_prompt(question, self.question_prefix), [" " + a for a in answers],
                          gold, target_delimiter="")

    def mc(self, row: Row, instance_id: str) -> MCInstance:
        question, answers, gold = self.question(row)
        prompt = lettered_prompt(question, answers, self.question_prefix, self.choices_prefix)
        return MCInstance(instance_id, prompt, letters(len(answers)), gold, target_delimiter="")


def _letter_gold(row: Row, answers: Sequence[str]) -> int:
    """The gold index from ``answerKey``: the letter of one of ``answers``, or (some ARC rows)
    its number from 1."""
    keys = LETTERS[: len(answers)]
    key = row.get("answerKey").strip()
    key = keys[int(key) - 1] if key.isdigit() and 0 < int(key) <= len(keys) else key
    if key not in keys:
        raise row.error("answerKey", f"must be one of {list(keys)} or 1-{len(keys)}, got {key!r}")
    return keys.index(key)


def _answer_texts(row: Row) -> List[str]:
    texts = row.get("choices", dict).get("text")
    if not isinstance(texts, list) or len(texts) < 2:
        raise row.error("choices", f"needs a list of at least 2 texts under 'text' (got {row.data['choices']!r})")
    return texts


class LetteredChoices(TaskFormat):
    """Rows with a question, ``choices.text`` and a lettered (or numbered) ``answerKey``."""

    question_field = "question"

    def question(self, row: Row) -> Question:
        answers = _answer_texts(row)
        return row.get(self.question_field), answers, _letter_gold(row, answers)


class Arc(LetteredChoices):
    dataset = ("ai2_arc", "ARC-Challenge")
    splits = ("train", "validation", "test")
    shots = "ARC-Challenge"


class ArcEasy(Arc):
    dataset = ("ai2_arc", "ARC-Easy")
    shots = "ARC-Easy"


class BoolQ(TaskFormat):
    """SuperGLUE's BoolQ rows (``idx``, ``label`` 1 for yes); the passage opens the question."""

    dataset = ("super_glue", "boolq")
    shots = "boolq"
    native_id_field = "idx"
    question_prefix = ""

    def question(self, row: Row) -> Question:
        prompt = f"{row.get('passage')}\nQuestion: {row.get('question')}?"
        return prompt, ["yes", "no"], 1 - row.index_of("label", [0, 1])


class CommonsenseQA(LetteredChoices):
    dataset = ("commonsense_qa", None)
    shots = "commonsense_qa"


class OpenBookQA(LetteredChoices):
    dataset = ("openbookqa", "main")
    splits = ("train", "validation", "test")
    shots = "openbookqa"
    question_field = "question_stem"


class Piqa(TaskFormat):
    dataset = ("piqa", None)
    shots = "piqa"
    native_id_field = None
    question_prefix = "Goal: "

    def question(self, row: Row) -> Question:
        return row.get("goal"), [row.get("sol1"), row.get("sol2")], row.index_of("label", [0, 1])


class SocialIQa(TaskFormat):
    dataset = ("social_i_qa", None)
    shots = "social_i_qa"
    native_id_field = None

    def question(self, row: Row) -> Question:
        answers = [row.get("answerA"), row.get("answerB"), row.get("answerC")]
        return f"{row.get('context')} {row.get('question')}", answers, row.index_of("label", ["1", "2", "3"])


def hellaswag_text(text: str) -> str:
    """WikiHow's bracketed markers out of HellaSwag's text: ``[title]`` becomes a full stop (one,
    not two), the other ``[...]`` go, and double spaces become one."""
    text = re.sub(r"\.? \[title\]", ". ", text.strip())
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


class HellaSwag(TaskFormat):
    """The context (activity label, ``ctx_a``, ``ctx_b`` capitalised) is continued by each ending;
    no ``Answer:`` in the cloze form. The lettered form is cleaned as a whole."""

    dataset = ("hellaswag", None)
    shots = "hellaswag"
    native_id_field = "ind"
    question_prefix = ""
    choices_prefix = "Choose the best continuation:\n"

    def question(self, row: Row) -> Question:
        context = f"{row.get('activity_label')}: {row.get('ctx_a')} {row.text('ctx_b').capitalize()}"
        endings = row.get("endings", list)
        return context, endings, row.index_of("label", [str(n) for n in range(len(endings))])

    def rc(self, row: Row, instance_id: str) -> MCInstance:
        context, endings, gold = self.question(row)
        return MCInstance(instance_id, hellaswag_text(context), [" " + hellaswag_text(e) for e in endings], gold,
                          target_delimiter="")

    def mc(self, row: Row, instance_id: str) -> MCInstance:
        context, endings, gold = self.question(row)
        prompt = hellaswag_text(lettered_prompt(context, endings, self.question_prefix, self.choices_prefix))
        return MCInstance(instance_id, prompt, letters(len(endings)), gold, target_delimiter="")


class WinoGrande(TaskFormat):
    """Cloze by partial evaluation: each option fills the blank in its own context (the sentence
    up to ``_``), and the rest of the sentence is the one continuation scored. Lettered: the
    sentence with ``___`` and the two options."""

    dataset = ("winogrande", "winogrande_xl")
    shots = "winogrande"
    native_id_field = None
    question_prefix = "Fill in the blank: "

    def question(self, row: Row) -> Question:
        sentence = row.get("sentence")
        if sentence.count("_") != 1:
            raise row.error("sentence", f"must contain exactly one '_' blank (got {sentence!r})")
        return sentence, [row.get("option1"), row.get("option2")], row.index_of("answer", ["1", "2"])

    def rc(self, row: Row, instance_id: str) -> MCInstance:
        sentence, options, gold = self.question(row)
        blank = sentence.index("_")
        rest = " " + sentence[blank + 1:].strip()
        contexts = [sentence[:blank] + option for option in options]
        return MCInstance(instance_id, contexts[gold], [rest, rest], gold, choice_contexts=contexts,
                          target_delimiter="")

    def mc(self, row: Row, instance_id: str) -> MCInstance:
        sentence, options, gold = self.question(row)
        prompt = lettered_prompt(sentence.replace("_", "___"), options, self.question_prefix)
        return MCInstance(instance_id, prompt, letters(2), gold, target_delimiter="")


#: OLMES v0.1's core tasks by the name its aliases begin with.
FORMATS = {
    "arc_challenge": Arc(), "arc_easy": ArcEasy(), "boolq": BoolQ(), "csqa": CommonsenseQA(),
    "hellaswag": HellaSwag(), "openbookqa": OpenBookQA(), "piqa": Piqa(), "socialiqa": SocialIQa(),
    "winogrande": WinoGrande(),
}
