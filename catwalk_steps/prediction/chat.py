"""``catwalk::predict``'s chat settings (lm-evaluation-harness's ``--apply_chat_template``,
``--system_instruction``, ``--fewshot_as_multiturn``): checked when the step graph is built, and
made into the :class:`~catwalk_steps.tasks.chat.ChatFormat` the task builds its prompts with."""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from tango.common.exceptions import ConfigurationError

from ..models.chat_templates import chat_renderer, check_chat_template
from ..models.loading import ModelSpec
from ..tasks.chat import ChatFormat

#: The request types whose prompts can be conversations: a perplexity document has no prompt.
CHAT_REQUEST_TYPES = ("multiple_choice", "generate_until")


@dataclass(frozen=True)
class ChatSettings:
    """``template``: ``True`` for the tokenizer's own chat template, or the name of one it
    carries; ``system_instruction``: the system turn (before the task's description);
    ``multiturn``: demonstrations as turns of their own (lm-evaluation-harness 0.4.10+'s default
    under a template), else folded into one user turn."""

    template: Union[bool, str]
    system_instruction: Optional[str] = None
    multiturn: bool = True

    @classmethod
    def of(cls, apply_chat_template: Union[bool, str], system_instruction: Optional[str],
           fewshot_as_multiturn: Optional[bool]) -> Optional["ChatSettings"]:
        if apply_chat_template is False:
            return None
        return cls(apply_chat_template, system_instruction, True if fewshot_as_multiturn is None else fewshot_as_multiturn)

    def format(self, spec: ModelSpec, tokenizer: Any) -> ChatFormat:
        check_chat_template(tokenizer, self.template, spec.pretrained)
        return ChatFormat(chat_renderer(tokenizer, self.template), self.system_instruction, self.multiturn)


def check_chat_settings(kwargs: Dict[str, Any]) -> None:
    """Raises at graph build for chat settings that cannot be met: wrong types, settings that need
    a template without one, a task whose requests have no prompt, ``unconditioned`` scoring, or a
    model whose tokenizer (when it is on this machine) has no such template."""
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
    kind = getattr(kwargs.get("task"), "REQUEST_TYPE", None)
    if kind is not None and kind not in CHAT_REQUEST_TYPES:
        raise ConfigurationError(
            f"apply_chat_template: {type(kwargs['task']).__name__} makes {kind} requests, which have no prompt to put "
            f"in a conversation (chat templates apply to {', '.join(CHAT_REQUEST_TYPES)})"
        )
    if kwargs.get("unconditioned"):
        raise ConfigurationError("unconditioned scoring (acc_uncond) has no chat form: leave it off with apply_chat_template")
    model = kwargs.get("model")
    if not isinstance(model, str):  # a fine-tuning step: its base model's tokenizer
        model = getattr(model, "kwargs", {}).get("model")
    if isinstance(model, str):
        spec = ModelSpec.parse(model, tokenizer=kwargs.get("tokenizer"))
        try:
            tokenizer = spec.load_tokenizer(local_files_only=True)
        except ConfigurationError:  # a hub model not downloaded yet: checked when it is
            return
        check_chat_template(tokenizer, template, spec.pretrained)
