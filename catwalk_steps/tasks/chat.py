"""Prompts as chat conversations, built as lm-evaluation-harness 0.4.13's ``fewshot_context``
builds them under ``--apply_chat_template``: a system message of the ``system_instruction`` and
the task's description; each few-shot demonstration a user turn (its question) and an assistant
turn (its answer); the question a last user turn. Without ``fewshot_as_multiturn`` the
demonstrations and the question are folded into one user turn, in their plain-text form. The
conversation is rendered to text by the model's chat template (:class:`ChatFormat`'s
``render``, built where the tokenizer is: :mod:`catwalk_steps.models.chat_templates`), with the
generation prompt that opens the assistant's turn.

Under a template a multiple-choice answer follows the assistant's turn directly: its target
delimiter is dropped (lm-evaluation-harness's rule, for tasks without a ``gen_prefix``).
"""

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .instance import GenerationInstance, MCInstance

#: ``render(messages, add_generation_prompt)``: a conversation as the model's chat template writes it.
Render = Callable[[List[Dict[str, str]], bool], str]
#: A demonstration: its question, the delimiter before its answer (in plain text), its answer.
Turn = Tuple[str, str, str]


@dataclass(frozen=True)
class ChatFormat:
    """How prompts become conversations: the template's ``render``, the ``system_instruction``
    and whether demonstrations are turns of their own (``multiturn``)."""

    render: Render
    system_instruction: Optional[str] = None
    multiturn: bool = True

    def messages(self, description: str, demonstrations: Sequence[Turn], question: str,
                 fewshot_delimiter: str = "\n\n") -> List[Dict[str, str]]:
        """The conversation of a prompt, before rendering."""
        system = _joined(self.system_instruction, description, fewshot_delimiter)
        head = [{"role": "system", "content": system}] if system else []
        if not self.multiturn:  # one user turn: the prompt's plain text
            text = "".join(q + delimiter + a + fewshot_delimiter for q, delimiter, a in demonstrations) + question
            return head + [{"role": "user", "content": text}]
        turns = [
            {"role": role, "content": content}
            for q, _, a in demonstrations for role, content in (("user", q), ("assistant", a))
        ]
        return head + turns + [{"role": "user", "content": question}]

    def prompt(self, description: str, demonstrations: Sequence[Turn], question: str) -> str:
        """The rendered prompt, ending where the assistant's answer begins."""
        return self.render(self.messages(description, demonstrations, question), True)

    def multiple_choice(self, instance: MCInstance, demonstrations: Sequence[MCInstance]) -> MCInstance:
        """A zero-shot multiple-choice ``instance`` with its ``demonstrations``, as a conversation:
        each choice context rendered, the continuations without the target delimiter."""
        turns = [
            (d.prompts()[d.label], d.target_delimiter, d.continuations[d.label][len(d.target_delimiter):])
            for d in demonstrations
        ]
        contexts = [self.prompt(instance.description, turns, prompt) for prompt in instance.prompts()]
        cut = len(instance.target_delimiter)
        return replace(
            instance, context=contexts[instance.label], continuations=[c[cut:] for c in instance.continuations],
            choice_contexts=contexts if instance.choice_contexts else None, target_delimiter="", description="",
        )

    def generation(self, instance: GenerationInstance, demonstrations: Sequence[GenerationInstance]) -> GenerationInstance:
        """A zero-shot generative ``instance`` with its ``demonstrations``, as a conversation."""
        turns = [(d.prompt, d.target_delimiter, d.references[0]) for d in demonstrations]
        return replace(instance, prompt=self.prompt("", turns, instance.prompt))


def _joined(first: Optional[str], second: Optional[str], delimiter: str) -> str:
    """lm-evaluation-harness's ``maybe_delimit``: the two joined, the delimiter only where
    neither has whitespace at the join."""
    if not first or not second:
        return first or second or ""
    return first + second if first[-1].isspace() or second[0].isspace() else first + delimiter + second
