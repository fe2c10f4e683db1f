"""Chat data as TRL's ``SFTTrainer`` takes it, read from a row and checked: conversational rows
(``{"messages": [{"role": ..., "content": ...}, ...]}``, or ``prompt`` and ``completion`` as lists
of such turns) and prompt-completion rows (``{"prompt": str, "completion": str}``).

A conversation is an optional system turn, then user and assistant turns alternating, starting
with a user turn and ending with an assistant turn: fine-tuning learns from it as TRL does
(:mod:`catwalk_steps.training.chat_rows`); evaluation generates the last assistant turn from the
turns before it (:mod:`.chat`).

Nothing in a row is dropped without a word: a turn's keys other than ``role`` and ``content`` (a
``name``, ``tool_calls``) are refused, since a template may write them and we would not; so is a
row that holds both ``messages`` and ``prompt``/``completion``, where one would be ignored.
"""

from typing import Any, Optional, Tuple

from .instance import Row

#: A conversation: ``(role, content)`` turns.
Conversation = Tuple[Tuple[str, str], ...]
ROLES = ("system", "user", "assistant")
#: The fields of a turn that are read.
TURN_KEYS = ("role", "content")


def conversation_of(row: Row) -> Optional[Tuple[Conversation, Optional[int]]]:
    """The row's conversation, checked, and for a conversational prompt/completion row how many
    of its turns are the prompt (``None`` for a ``messages`` row); ``None`` for a row that is not
    conversational."""
    prompt, completion = row.data.get("prompt"), row.data.get("completion")
    if row.data.get("messages") is not None:
        if prompt is not None or completion is not None:
            raise row.error("messages", "is given beside prompt/completion: a row is either a conversation "
                                        "(messages) or a prompt and its completion, not both; keep one")
        return checked(row, "messages", row.data["messages"]), None
    if isinstance(prompt, list) or isinstance(completion, list):
        for name, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, list) or not value:
                raise row.error(name, f"must be a non-empty list of turns like the other field, got {value!r}")
        return checked(row, "prompt/completion", prompt + completion), len(prompt)
    if prompt is None and completion is None:
        near = [key for key in row.data if key.rstrip("s") in ("message", "conversation", "turn")]
        if near:
            raise row.error(near[0], "is not a field catwalk reads: a conversation goes in 'messages' "
                                     "(a list of {'role': ..., 'content': ...} turns)")
    return None


def checked(row: Row, name: str, turns: Any) -> Conversation:
    """``turns`` (field ``name`` of ``row``) as a conversation, or a :class:`~.instance.DataError`
    naming the turn and what is wrong with it."""
    if not isinstance(turns, list) or not turns:
        raise row.error(name, f"must be a non-empty list of {{'role': ..., 'content': ...}} turns, got {turns!r}")
    conversation = []
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            raise row.error(name, f"turn {number} must be an object with 'role' and 'content', got {turn!r}")
        role, content = turn.get("role"), turn.get("content")
        if "tool_calls" in turn or role == "tool":
            raise row.error(name, f"turn {number} is a tool call or a tool's answer, which catwalk does not train "
                                  "or evaluate: remove such rows (TRL takes them with a 'tools' column)")
        if role not in ROLES:
            raise row.error(name, f"turn {number} has role {role!r}: use one of {', '.join(ROLES)}")
        extra = sorted(set(turn) - set(TURN_KEYS))
        if extra:
            raise row.error(name, f"turn {number} ({role}) has keys {', '.join(map(repr, extra))}, which catwalk "
                                  "does not pass to the chat template: keep only 'role' and 'content'")
        if not isinstance(content, str):
            raise row.error(name, f"turn {number} ({role}) has content {content!r}: it must be a string")
        conversation.append((role, content))
    exchange = conversation[1:] if conversation[0][0] == "system" else conversation
    for number, (role, _) in enumerate(exchange):
        expected = "user" if number % 2 == 0 else "assistant"
        if role != expected:
            place = number + 1 + len(conversation) - len(exchange)
            raise row.error(
                name, f"turn {place} is {_a(role)} turn where {_a(expected)} turn belongs: after an optional "
                "system turn, user and assistant turns alternate, starting with a user turn"
            )
    if not exchange or exchange[-1][0] != "assistant":
        raise row.error(name, "has no assistant turn at its end: the answer to learn and to generate")
    return tuple(conversation)


def _a(role: str) -> str:
    return ("an " if role == "assistant" else "a ") + role
