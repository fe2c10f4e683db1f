"""``catwalk::export_model``: a cached fine-tune out of the cache, as a standard model folder."""

from pathlib import Path
from typing import Any, Dict

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..models.finetuned import FinetunedModel
from ..models.pretrained_folder import write_pretrained_folder
from .export import check_output_dir
from .finetune import FinetuneStep


@Step.register("catwalk::export_model")
class ExportModelStep(Step):
    """Writes a ``catwalk::finetune`` result into ``output_dir`` as a ``save_pretrained`` folder
    that transformers' ``AutoModelForCausalLM.from_pretrained``, lm-evaluation-harness's ``--model
    hf pretrained=...`` and vLLM load as they are (:mod:`..models.pretrained_folder`): config,
    safetensors weights, generation config, and the tokenizer with the chat template the model was
    trained under as its default. An adapter's run writes the peft adapter folder (for
    ``PeftModel.from_pretrained`` on the base model), or, with ``merge_adapter: true``, the base
    model with the adapter merged into its weights. The folder is replaced whole, never half-written.

    Not cached: the cache holds the weights already; this copies them out.
    """

    CACHEABLE = False

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        check_output_dir(kwargs.get("output_dir", ""))
        check_exported_step(kwargs.get("model"), kwargs.get("merge_adapter", False))
        return kwargs

    def run(self, model: FinetunedModel, output_dir: str, merge_adapter: bool = False) -> str:  # type: ignore[override]
        """
        :param model: a ``catwalk::finetune`` step's result.
        :param output_dir: the folder to write (created, or replaced whole).
        :param merge_adapter: for an adapter's run, the adapter merged into the base weights (a
            plain model folder) instead of the adapter folder alone.
        :returns: the folder written, as an absolute path.
        """
        folder = write_pretrained_folder(model, Path(output_dir), merge_adapter)
        self.logger.info("Wrote %s", folder)
        return str(folder)


def check_exported_step(model: Any, merge_adapter: bool) -> None:
    """Refuses, when the step graph is built (before the step it names runs), a ``model`` that
    is another step's result than a fine-tune's, and ``merge_adapter`` on a fine-tune of every
    weight, which has no adapter to merge."""
    if not isinstance(model, Step):
        return  # a result handed over in Python
    if not isinstance(model, FinetuneStep):
        raise ConfigurationError(
            f"ExportModelStep: model must be a catwalk::finetune step's result, and '{model.name}' is a "
            f"{type(model).__name__}: "
            "refer to a fine-tuning step"
        )
    if merge_adapter and model.kwargs.get("adapter") is None:
        raise ConfigurationError(
            f"ExportModelStep: merge_adapter merges an adapter into its base model, and '{model.name}' trains every "
            "weight (it has no adapter): leave merge_adapter unset"
        )
