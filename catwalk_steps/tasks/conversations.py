"""Chat data as TRL's ``SFTTrainer`` takes it, read from a row and checked: conversational rows
(``{"messages": [{"role": ..., "content": ...}, ...]}``, or ``prompt`` and ``completion`` as lists
of such turns) and prompt-completion rows (``{"prompt": str, "completion": str}``).

A conversation is an optional system turn, then user and assistant turns alternating, starting
with a user turn and ending with an assistant turn: fine-tuning learns every assistant turn;
evaluation generates the last one from the turns before it (:mod:`.chat`).
"""

from typing import Any, Optional, Tuple

from .instance import Row

#: A conversation: ``(role, content)`` turns.
Conversation = Tuple[Tuple[str, str], ...]
ROLES = ("system", "user", "assistant")


def conversation_of(row: Row) -> Optional[Conversation]:
    """The row's conversation, checked; ``None`` for a row that is not conversational."""
    if row.data.get("messages") is not None:
        return checked(row, "messages", row.data["messages"])
    prompt, completion = row.data.get("prompt"), row.data.get("completion")
    if isinstance(prompt, list) or isinstance(completion, list):
        for name, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, list):
                raise row.error(name, f"must be a list of turns like the other field, got {value!r}")
        return checked(row, "prompt/completion", prompt + completion)
    return None


def checked(row: Row, name: str, turns: Any) -> Conversation:
    """``turns`` (field ``name`` of ``row``) as a conversation, or a :class:`~.instance.DataError`
    naming the turn and what is wrong with it."""
    if not isinstance(turns, list) or not turns:
        raise row.error(name, f"must be a non-empty list of {{'role': ..., 'content': ...}} turns, got {turns!r}")
    conversation = []
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):  # other fields of a turn (a name, ...) are not read
            raise row.error(name, f"turn {number} must be an object with 'role' and 'content', got {turn!r}")
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES:
            raise row.error(name, f"turn {number} has role {role!r}: use one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise row.error(name, f"turn {number} ({role}) has content {content!r}: it must be a string")
        conversation.append((role, content))
    exchange = conversation[1:] if conversation[0][0] == "system" else conversation
    for number, (role, _) in enumerate(exchange):
        expected = "user" if number % 2 == 0 else "assistant"
        if role != expected:
            place = number + 1 + len(conversation) - len(exchange)
            raise row.error(
                name, f"turn {place} is a {role} turn where a {expected} turn belongs: after an optional system "
                "turn, user and assistant turns alternate, starting with a user turn"
            )
    if not exchange or exchange[-1][0] != "assistant":
        raise row.error(name, "has no assistant turn at its end: the answer to learn and to generate")
    return tuple(conversation)
