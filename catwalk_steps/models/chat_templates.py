"""A tokenizer's chat template as the function that renders conversations to prompt text
(:data:`catwalk_steps.tasks.chat.Render`), as lm-evaluation-harness 0.4.13's
``HFLM.apply_chat_template`` calls it: ``tokenize=False``, the generation prompt unless the
assistant's turn is already begun (then ``continue_final_message``), and, where the template
refuses a system turn, the conversation again without it."""

import json
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

from tango.common.exceptions import ConfigurationError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .loading import ModelSpec

logger = logging.getLogger(__name__)


def template_names(tokenizer: "PreTrainedTokenizerBase") -> List[str]:
    """The names of the templates a tokenizer carries (``default`` for a single one)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return sorted(template)
    return ["default"] if template else []


def check_chat_template(tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str], model: str,
                        conversations: bool = False) -> None:
    """Raises unless ``tokenizer`` has the template asked for (``True``: its own);
    ``conversations``: the data is conversations, which no prompt in plain text can hold."""
    names = template_names(tokenizer)
    if not names:
        given = "give a tokenizer of the same vocabulary that has one (tokenizer: its instruction-tuned version's)"
        if conversations:
            raise ConfigurationError(
                f"The tokenizer of {model} has no chat template, which conversations need to become prompts (a base "
                f"model's tokenizer usually has none): {given} and set apply_chat_template"
            )
        raise ConfigurationError(
            f"apply_chat_template: the tokenizer of {model} has no chat template (a base model's tokenizer usually "
            f"has none): leave apply_chat_template unset for prompts in plain text, or {given}"
        )
    if isinstance(template, str) and template not in names:
        raise ConfigurationError(
            f"apply_chat_template: the tokenizer of {model} has no chat template named {template!r} "
            f"(has: {', '.join(names)}); write true for its default"
        )


def check_model_template(kwargs: Dict[str, Any], conversations: bool = False) -> None:
    """At graph build, for a step with ``apply_chat_template``, or data of ``conversations``:
    raises unless the tokenizer of its ``model`` (a spec, a fine-tuned model, or a fine-tuning
    step's base model and tokenizer) has the template (any, for conversations without one asked
    for: the data's own refusal then asks for one), where that tokenizer is on this machine (a hub
    model not downloaded yet is checked when it is)."""
    template = kwargs.get("apply_chat_template", False)
    spec = model_spec_of(kwargs)
    if (template is False and not conversations) or spec is None:
        return
    try:
        tokenizer = spec.load_tokenizer(local_files_only=True)
    except ConfigurationError:
        return
    check_chat_template(tokenizer, True if template is False else template, spec.pretrained, conversations)


def model_spec_of(kwargs: Dict[str, Any]) -> Optional["ModelSpec"]:
    """The model a step's ``model`` names, with its tokenizer: a spec (and the step's ``tokenizer``),
    a fine-tuned model's, or a fine-tuning step's base model and ``tokenizer``; ``None`` if unknown."""
    from .loading import ModelSpec

    model = kwargs.get("model")
    if isinstance(model, str):
        return ModelSpec.parse(model, tokenizer=kwargs.get("tokenizer"))
    if getattr(model, "spec", None) is not None:
        return model.spec
    settings = getattr(model, "kwargs", {})
    if isinstance(settings.get("model"), str):
        return ModelSpec.parse(settings["model"], tokenizer=settings.get("tokenizer"))
    return None


def trained_template(model: Any) -> Union[bool, str, None]:
    """The chat template a model was fine-tuned under (``None``: none): a fine-tuned model's
    (:attr:`.loading.ModelSpec.chat_template`), or, when the step graph is built, the setting of
    the fine-tuning step that makes it."""
    spec = getattr(model, "spec", None)
    if spec is not None:
        return spec.chat_template
    template = getattr(model, "kwargs", {}).get("apply_chat_template", False)
    return None if template is False else template


def same_template(one: Union[bool, str], other: Union[bool, str]) -> bool:
    """Whether two ``apply_chat_template`` values name one template (``true`` is ``default``)."""
    return (one is not False and other is not False and template_name(one) == template_name(other)) or one is other


def check_evaluated_template(kwargs: Dict[str, Any], prompted: bool = True, conversations: bool = False) -> None:
    """At graph build, for ``catwalk::predict``: ``apply_chat_template`` unset becomes the model's
    (the template it was fine-tuned under; else none, a stock model's default), and a model
    fine-tuned under a template is not evaluated without it, or under another, unless
    ``allow_other_template``: its prompts would be text it never saw. ``prompted``: the task's
    requests have prompts (a document scored whole has none, so no template applies to it);
    ``conversations``: its data is conversations, which need a template whatever the model."""
    trained = trained_template(kwargs.get("model"))
    asked = kwargs.get("apply_chat_template")
    if asked is None:
        kwargs["apply_chat_template"] = trained if prompted and trained is not None else False
        return
    if not prompted or trained is None or same_template(asked, trained):
        return
    needed = asked is False and conversations  # (then allow_other_template would not help)
    if kwargs.get("allow_other_template") and not needed:
        return
    ways_out = "Leave apply_chat_template unset to use it"
    if needed:
        problem = "and conversations need a template to become prompts"
    else:
        problem = "its prompts would be text it never saw"
        ways_out += ", or set allow_other_template: true to evaluate it so on purpose"
    raise ConfigurationError(f"apply_chat_template: {json.dumps(asked)}, but the model was fine-tuned under "
                             f"{template_in_words(trained)}: {problem}. {ways_out}")


def template_in_words(template: Union[bool, str]) -> str:
    """``apply_chat_template``'s value as a message names it."""
    name = template_name(template)
    return "its tokenizer's own chat template" if name is None else f"the chat template {name!r}"


def template_renderer(
    tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str], model: str, strict: bool = False
) -> Callable[..., str]:
    """:func:`chat_renderer` of a template checked to exist (:func:`check_chat_template`)."""
    check_chat_template(tokenizer, template, model)
    return chat_renderer(tokenizer, template, strict)


def template_name(template: Union[bool, str]) -> Optional[str]:
    """The name ``apply_chat_template(chat_template=...)`` takes for ``template``: ``None`` for
    the tokenizer's default."""
    return template if isinstance(template, str) and template != "default" else None


def chat_renderer(
    tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str], strict: bool = False
) -> Callable[..., str]:
    """``render(messages, add_generation_prompt=True, continue_final_message=None)``: the
    conversation as ``tokenizer``'s template (``True``: its default; a name: that one of its
    templates) writes it (:data:`catwalk_steps.tasks.chat.Render`).

    A template that refuses the conversation's system turn (Gemma's, Mistral's) gets it again
    without that turn, with a warning, as lm-evaluation-harness does, unless ``strict``
    (training: the data would change without a word), where it is refused."""
    import jinja2

    name = template_name(template)
    warned = []

    def render(messages: List[Dict[str, str]], add_generation_prompt: bool = True,
               continue_final_message: Optional[bool] = None) -> str:
        if continue_final_message is None:  # lm-evaluation-harness's: an assistant turn begun is continued
            continue_final_message = not add_generation_prompt
        settings = dict(tokenize=False, add_generation_prompt=add_generation_prompt,
                        continue_final_message=continue_final_message, chat_template=name)
        try:
            return tokenizer.apply_chat_template(messages, **settings)
        except jinja2.exceptions.TemplateError as error:
            system = any(m["role"] == "system" for m in messages)
            if strict or not system:
                way_out = ("leave the system turns out of the rows, or train under a template that takes them "
                           "(apply_chat_template)" if system else "write the rows as the template asks")
                raise ConfigurationError(f"The chat template of {tokenizer.name_or_path} refuses the conversation "
                                         f"{_roles(messages)}: {error}; {way_out}") from error
            if not warned:
                warned.append(True)
                logger.warning("The chat template of %s refuses a system turn (%s): the system turns are left out, "
                               "as lm-evaluation-harness leaves them out", tokenizer.name_or_path, error)
            return tokenizer.apply_chat_template([m for m in messages if m["role"] != "system"], **settings)

    return render


def _roles(messages: List[Dict[str, str]]) -> str:
    return "(" + ", ".join(m["role"] for m in messages) + ")"
