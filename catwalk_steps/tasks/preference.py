"""Preference pairs as TRL 1.16's ``DPOTrainer`` takes them: a prompt, a chosen answer and a
rejected one, as plain strings (``{"prompt": str, "chosen": str, "rejected": str}``) or as
conversations (``prompt``, ``chosen`` and ``rejected`` as lists of ``{"role", "content"}`` turns),
or TRL's implicit-prompt rows (``{"chosen": [...], "rejected": [...]}``, whole conversations whose
common leading turns are the prompt, as TRL's ``extract_prompt`` splits them).

Every row is checked when the split is read, before any model loads: a missing field, a row whose
fields mix strings and turns, an empty answer, each a :class:`~.instance.DataError` naming the
file, the line and the field. Conversations go through the model's chat template
(``apply_chat_template``); the instance then holds the template's texts, as TRL renders them: the
prompt with the generation prompt, and the prompt followed by each answer's turns.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from tango.common.exceptions import ConfigurationError

from .base import Task
from .chat import ChatFormat
from .conversations import Conversation, checked
from .instance import Row
from .row_task import RowTask

FIELDS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class PreferenceInstance:
    """One preference pair: the ``prompt``'s text and the whole texts of the prompt followed by
    the ``chosen`` answer and by the ``rejected`` one. ``chat`` false: plain text, each answer right
    after the prompt as the row gives it (its EOS is appended where it is encoded,
    :mod:`catwalk_steps.models.preference_rows`); true: the chat template's texts, the prompt with
    the generation prompt. ``answers``: the chosen and the rejected answer as the row gave them
    (the last turn's text), for diffs."""

    id: str
    prompt: str
    chosen: str
    rejected: str
    chat: bool
    answers: Tuple[str, str]


def _turns(value: Any) -> bool:
    return isinstance(value, list)


def _implicit_prompt(chosen: Conversation, rejected: Conversation) -> int:
    """How many leading turns ``chosen`` and ``rejected`` share (TRL's ``extract_prompt``)."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    return shared


def _answer(row: Row, name: str, turns: Conversation) -> str:
    content = turns[-1][1]
    if not content.strip():
        raise row.error(name, "has an empty answer (its last turn's content): there is nothing to prefer")
    return content


@Task.register("preference")
class PreferenceTask(RowTask):
    """Any local JSONL (or json/csv/parquet) of preference rows (see the module): ``catwalk::finetune``
    learns them by DPO (:mod:`catwalk_steps.kinds.preference`), ``catwalk::predict`` scores each
    pair (the summed log-probability of the chosen answer and of the rejected one after the
    prompt). Conversations need a chat template (``apply_chat_template``)."""

    REQUEST_TYPE = "preference"
    VERSION = "1"

    def instances(self, split: str, limit: Optional[int] = None, chat: Optional[ChatFormat] = None) -> List[Any]:
        rows, source = self.load_rows(split)
        count = len(rows) if limit is None else min(limit, len(rows))
        instances = []
        for n in range(count):
            row = Row(rows[n], source, n + 1)
            instance = self.pair(row, chat, split, f"{split}/{n}")
            if instances and instance.chat != instances[0].chat:
                kinds = {True: "a list of turns", False: "a string"}
                raise row.error("chosen", f"is {kinds[instance.chat]} where the split's first row's is "
                                          f"{kinds[instances[0].chat]}: a split is all text or all conversations")
            instances.append(instance)
        return instances

    def pair(self, row: Row, chat: Optional[ChatFormat], split: str, instance_id: str) -> PreferenceInstance:
        """The row as a pair, checked (a conversation rendered by ``chat``)."""
        values = {name: row.data.get(name) for name in FIELDS}
        for name in ("chosen", "rejected"):
            if values[name] is None:
                raise row.error(name, "is missing: a preference row needs prompt (unless its answers are whole "
                                      "conversations), chosen and rejected")
        conversational = [name for name in FIELDS if _turns(values[name])]
        if not conversational:
            prompt, chosen, rejected = (row.get(name) for name in FIELDS)
            return PreferenceInstance(instance_id, prompt, prompt + chosen, prompt + rejected, False, (chosen, rejected))
        plain = [name for name in FIELDS if values[name] is not None and not _turns(values[name])]
        if plain:
            raise row.error(plain[0], f"is a string while {conversational[0]} is a list of turns: give every field "
                                      "as text or every field as turns")
        if chat is None:
            raise ConfigurationError(
                f"{type(self).__name__}: split {split!r} holds conversations, which only a chat template turns into "
                "text: set apply_chat_template (in a config) or --apply_chat_template (on the command line)"
            )
        prompt, chosen, rejected = self.turns(row, values)
        answers = (_answer(row, "chosen", chosen), _answer(row, "rejected", rejected))

        def render(turns: Conversation, add_generation_prompt: bool) -> str:
            messages = [{"role": role, "content": content} for role, content in turns]
            return chat.render(messages, add_generation_prompt, continue_final_message=False)

        return PreferenceInstance(instance_id, render(prompt, True), render(prompt + chosen, False),
                                  render(prompt + rejected, False), True, answers)

    @staticmethod
    def turns(row: Row, values: Dict[str, Any]) -> Tuple[Conversation, Conversation, Conversation]:
        """A conversational row's prompt, chosen and rejected turns, each answer checked as the
        end of a conversation after the prompt."""
        if values["prompt"] is None:  # TRL's implicit prompt: the leading turns both answers share
            chosen, rejected = checked(row, "chosen", values["chosen"]), checked(row, "rejected", values["rejected"])
            shared = _implicit_prompt(chosen, rejected)
            if shared == 0:
                raise row.error("prompt", "is missing, and chosen and rejected share no leading turn to be it")
            prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
        else:
            for name in FIELDS:
                if not values[name]:
                    raise row.error(name, "is an empty list of turns")
            whole = {name: checked(row, f"prompt/{name}", values["prompt"] + values[name]) for name in FIELDS[1:]}
            prompt = whole["chosen"][:len(values["prompt"])]
            chosen, rejected = (whole[name][len(values["prompt"]):] for name in FIELDS[1:])
        for name, turns in (("chosen", chosen), ("rejected", rejected)):
            if not turns:
                raise row.error(name, "holds no turn after the prompt: give the answer")
        return prompt, chosen, rejected
