"""A tokenizer's chat template as the function that renders conversations to prompt text
(:data:`catwalk_steps.tasks.chat.Render`), as lm-evaluation-harness 0.4.13's
``HFLM.apply_chat_template`` calls it: ``tokenize=False``, the generation prompt unless the
assistant's turn is already begun (then ``continue_final_message``), and, where the template
refuses a system turn, the conversation again without it."""

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

from tango.common.exceptions import ConfigurationError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def template_names(tokenizer: "PreTrainedTokenizerBase") -> List[str]:
    """The names of the templates a tokenizer carries (``default`` for a single one)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return sorted(template)
    return ["default"] if template else []


def check_chat_template(tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str], model: str) -> None:
    """Raises unless ``tokenizer`` has the template asked for (``True``: its own)."""
    names = template_names(tokenizer)
    if not names:
        raise ConfigurationError(
            f"apply_chat_template: the tokenizer of {model} has no chat template (a base model's tokenizer "
            "usually has none): leave apply_chat_template unset, or use an instruction-tuned model's tokenizer"
        )
    if isinstance(template, str) and template not in names:
        raise ConfigurationError(
            f"apply_chat_template: the tokenizer of {model} has no chat template named {template!r} "
            f"(has: {', '.join(names)}); write true for its default"
        )


def check_model_template(kwargs: Dict[str, Any]) -> None:
    """At graph build, for a step with ``apply_chat_template``: raises unless the tokenizer of its
    ``model`` (a spec, or a fine-tuning step's base model) has the template, where that tokenizer
    is on this machine (a hub model not downloaded yet is checked when it is)."""
    from .loading import ModelSpec

    template = kwargs.get("apply_chat_template", False)
    model = kwargs.get("model")
    if not isinstance(model, str):
        model = getattr(model, "kwargs", {}).get("model")
    if template is False or not isinstance(model, str):
        return
    spec = ModelSpec.parse(model, tokenizer=kwargs.get("tokenizer"))
    try:
        tokenizer = spec.load_tokenizer(local_files_only=True)
    except ConfigurationError:
        return
    check_chat_template(tokenizer, template, spec.pretrained)


def template_renderer(tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str], model: str) -> Callable[..., str]:
    """:func:`chat_renderer` of a template checked to exist (:func:`check_chat_template`)."""
    check_chat_template(tokenizer, template, model)
    return chat_renderer(tokenizer, template)


def chat_renderer(
    tokenizer: "PreTrainedTokenizerBase", template: Union[bool, str]
) -> Callable[..., str]:
    """``render(messages, add_generation_prompt=True, continue_final_message=None)``: the
    conversation as ``tokenizer``'s template (``True``: its default; a name: that one of its
    templates) writes it (:data:`catwalk_steps.tasks.chat.Render`)."""
    import jinja2

    name: Optional[str] = template if isinstance(template, str) and template != "default" else None

    def render(messages: List[Dict[str, str]], add_generation_prompt: bool = True,
               continue_final_message: Optional[bool] = None) -> str:
        if continue_final_message is None:  # lm-evaluation-harness's: an assistant turn begun is continued
            continue_final_message = not add_generation_prompt
        settings = dict(tokenize=False, add_generation_prompt=add_generation_prompt,
                        continue_final_message=continue_final_message, chat_template=name)
        try:
            return tokenizer.apply_chat_template(messages, **settings)
        except jinja2.exceptions.TemplateError:  # e.g. Gemma's and Mistral's refuse a system turn
            return tokenizer.apply_chat_template([m for m in messages if m["role"] != "system"], **settings)

    return render
