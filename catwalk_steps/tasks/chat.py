"""Prompts as chat conversations, built as lm-evaluation-harness 0.4.13's ``fewshot_context``
builds them under ``--apply_chat_template``: a system message of the ``system_instruction`` and
the task's description; each few-shot demonstration a user turn (its question) and an assistant
turn (its answer); the question a last user turn. Without ``fewshot_as_multiturn`` the
demonstrations and the question are folded into one user turn, in their plain-text form. The
conversation is rendered to text by the model's chat template (:class:`ChatFormat`'s
``render``, built where the tokenizer is: :mod:`catwalk_steps.models.chat_templates`), with the
generation prompt that opens the assistant's turn.

Under a template a multiple-choice answer follows the assistant's turn directly: its target
delimiter is dropped (lm-evaluation-harness's rule, for tasks without a ``gen_prefix``). A
``loglikelihood`` target (LAMBADA's last word) follows it as it is, its leading space included.
"""

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tango.common.exceptions import ConfigurationError

from .instance import GenerationInstance, MCInstance, TargetInstance

logger = logging.getLogger(__name__)

#: ``render(messages, add_generation_prompt, continue_final_message=None)``: a conversation as the
#: model's chat template writes it; ``continue_final_message`` defaults to ``not add_generation_prompt``
#: (lm-evaluation-harness's call), and ``False`` with a closing assistant turn writes that turn whole.
Render = Callable[..., str]
#: A demonstration: its question, the delimiter before its answer (in plain text), its answer.
Turn = Tuple[str, str, str]


@dataclass(frozen=True)
class ChatSettings:
    """A step's chat settings (lm-evaluation-harness's ``--apply_chat_template``,
    ``--system_instruction``, ``--fewshot_as_multiturn``). ``template``: ``True`` for the
    tokenizer's own chat template, or the name of one it carries; ``system_instruction``: the
    system turn (before the task's description); ``multiturn``: demonstrations as turns of their
    own (lm-evaluation-harness 0.4.10+'s default under a template), else folded into one user turn."""

    template: Union[bool, str]
    system_instruction: Optional[str] = None
    multiturn: bool = True

    @classmethod
    def of(cls, apply_chat_template: Union[bool, str], system_instruction: Optional[str] = None,
           fewshot_as_multiturn: Optional[bool] = None) -> Optional["ChatSettings"]:
        """The settings of a step's arguments; ``None`` without a template."""
        if apply_chat_template is False:
            return None
        multiturn = True if fewshot_as_multiturn is None else fewshot_as_multiturn
        return cls(apply_chat_template, system_instruction, multiturn)

    def format(self, render: "Render") -> "ChatFormat":
        return ChatFormat(render, self.system_instruction, self.multiturn)


def check_chat_settings(kwargs: Dict[str, Any], tasks: Sequence[Any], conversational: Sequence[str]) -> None:
    """Raises at graph build for chat settings that cannot be met: wrong types, settings that need
    a template without one, a task whose requests have no prompt, ``unconditioned`` scoring.

    ``conversational``: the request types whose prompts can be conversations (the request kinds
    say: a perplexity document has no prompt, and lm-evaluation-harness scores it without a
    template under ``--apply_chat_template`` too)."""
    template = kwargs.get("apply_chat_template", False)
    if not isinstance(template, (bool, str)) or template == "":
        raise ConfigurationError(f"apply_chat_template must be true, false or a template's name, got {template!r}")
    if kwargs.get("system_instruction") is not None and not isinstance(kwargs["system_instruction"], str):
        raise ConfigurationError(f"system_instruction must be a string, got {kwargs['system_instruction']!r}")
    if kwargs.get("fewshot_as_multiturn") not in (None, True, False):
        raise ConfigurationError(f"fewshot_as_multiturn must be true or false, got {kwargs['fewshot_as_multiturn']!r}")
    if template is False:
        for name in ("system_instruction", "fewshot_as_multiturn"):
            if kwargs.get(name) is not None:
                raise ConfigurationError(f"{name} is a chat setting: set apply_chat_template too")
        return
    for task in tasks:
        kind = getattr(task, "REQUEST_TYPE", None)
        if kind is not None and kind not in conversational:
            raise ConfigurationError(
                f"apply_chat_template: {type(task).__name__} makes {kind} requests, which have no prompt to put "
                f"in a conversation (templates apply to {', '.join(conversational)}; lm-evaluation-harness scores "
                "the others without one): leave apply_chat_template unset or false"
            )
    if kwargs.get("unconditioned"):
        raise ConfigurationError("unconditioned scoring (acc_uncond) has no chat form: leave it off with apply_chat_template")


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

    def target(self, instance: TargetInstance) -> TargetInstance:
        """A zero-shot ``loglikelihood`` instance as a conversation: its context the user turn,
        the target after the generation prompt as it is (lm-evaluation-harness's request keeps
        ``doc_to_target`` whole: it has no target delimiter to drop)."""
        return replace(instance, context=self.prompt("", [], instance.context))

    def generation(self, instance: GenerationInstance, demonstrations: Sequence[GenerationInstance]) -> GenerationInstance:
        """A zero-shot generative ``instance`` with its ``demonstrations``, as a conversation: its
        prompt what precedes the answer, its ``messages`` the whole conversation that fine-tuning
        learns from (:mod:`catwalk_steps.training.chat_rows`). A row that is not a conversation
        becomes a prompt/completion conversation: the demonstrations and the question its prompt,
        the answer its completion. A conversational row is its own conversation."""
        if instance.messages is None:
            turns = [(d.prompt, d.target_delimiter, d.references[0]) for d in demonstrations]
            messages = self.messages("", turns, instance.prompt)
            conversation = tuple((m["role"], m["content"]) for m in messages) + (("assistant", instance.references[0]),)
            return replace(instance, prompt=self.render(messages, True), messages=conversation,
                           prompt_turns=len(messages))
        if demonstrations:
            raise ConfigurationError(
                f"Instance {instance.id} is a conversation: it carries its own turns, so num_shots must be 0"
            )
        conversation = instance.messages
        if self.system_instruction:
            if conversation[0][0] == "system":
                logger.warning("system_instruction is not used for instance %s: its conversation has a system turn "
                               "of its own", instance.id)
            else:
                conversation = (("system", self.system_instruction),) + conversation
        added = len(conversation) - len(instance.messages)  # the system instruction's turn
        prompt_turns = None if instance.prompt_turns is None else instance.prompt_turns + added
        try:
            prompt = self.render([{"role": role, "content": content} for role, content in conversation[:-1]], True)
        except ConfigurationError as error:
            raise ConfigurationError(f"Instance {instance.id}: {error}") from error
        return replace(instance, prompt=prompt, messages=conversation, prompt_turns=prompt_turns)


def _joined(first: Optional[str], second: Optional[str], delimiter: str) -> str:
    """lm-evaluation-harness's ``maybe_delimit``: the two joined, the delimiter only where
    neither has whitespace at the join."""
    if not first or not second:
        return first or second or ""
    return first + second if first[-1].isspace() or second[0].isspace() else first + delimiter + second
