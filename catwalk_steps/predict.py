"""``catwalk::predict``: score every answer choice of a task split by log-likelihood."""

from typing import Any, Dict, List, Optional, Union

import torch
from tango import Step
from tango.common import Tqdm
from tango.common.exceptions import ConfigurationError

from .atomic import AtomicJsonFormat
from .journal import Journal, fingerprint
from .models.loading import ModelName, ModelSpec, context_window
from .models.scoring import encode_pair, score_queries
from .tasks import MultipleChoiceTask
from .weights import FinetunedModel


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is taken as a torch device name."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as e:
        raise ConfigurationError(f"Unknown device {device!r}: {e}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError(f"device={device!r}, but no CUDA device is present")
    return resolved


@Step.register("catwalk::predict")
class PredictStep(Step):
    """Scores each choice of each instance of ``task``'s ``split`` with ``model``.

    ``model`` is a spec (``rc::gpt2``) for a stock pretrained model, or the result of
    ``catwalk::finetune``. The result is one JSON-safe record per instance: its id, gold label,
    group (if the task has groups), and per choice the summed log-likelihood, token count and
    the character count of the answer text (without the target delimiter, as
    lm-evaluation-harness's ``acc_norm`` counts), and, for tasks with an
    ``unconditioned_context``, the log-likelihood after that context alone. From these
    :class:`CalculateMetricsStep` derives every metric without scoring again.

    The device and the batching knobs change how fast, not what, so they are not in the cache
    key (batching can move a log-likelihood by ~1e-6 through padding, never a prediction).
    """

    VERSION = "cw2"  # cw2: num_chars without the target delimiter; group
    FORMAT = AtomicJsonFormat()
    SKIP_ID_ARGUMENTS = {"device", "max_batch_size", "max_batch_tokens"}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        if kwargs.get("max_batch_size", 1) < 1 or kwargs.get("max_batch_tokens", 1) < 1:
            raise ConfigurationError("max_batch_size and max_batch_tokens must be positive")
        resolve_device(kwargs.get("device", "auto"))
        if kwargs.get("dtype", "float32") not in DTYPES:
            raise ConfigurationError(f"dtype must be one of {', '.join(DTYPES)}, got {kwargs['dtype']!r}")
        if isinstance(kwargs.get("model"), str):
            ModelSpec.parse(kwargs["model"])
        # The key holds a local model's (and tokenizer's) file contents, not only its path.
        for name in ("model", "tokenizer"):
            if isinstance(kwargs.get(name), str):
                kwargs[name] = ModelName(kwargs[name])
        return kwargs

    def run(  # type: ignore[override]
        self,
        model: Union[str, FinetunedModel],
        task: MultipleChoiceTask,
        *,
        split: str = "validation",
        limit: Optional[int] = None,
        tokenizer: Optional[str] = None,
        device: str = "auto",
        dtype: str = "float32",
        max_batch_size: int = 32,
        max_batch_tokens: int = 16384,
    ) -> List[Dict[str, Any]]:
        """
        :param limit: score only the first ``limit`` instances.
        :param tokenizer: for a model spec, the tokenizer if not the model's own.
        :param device: ``"auto"`` (CUDA if present, else CPU), or a torch device such as ``"cuda:1"``.
        :param dtype: the weights' dtype while scoring: ``"bfloat16"`` or ``"float16"`` for speed on
            GPUs (log-probabilities are still normalised in float32). Part of the cache key.
        :param max_batch_size: most queries (context, continuation pairs) in one forward pass.
        :param max_batch_tokens: most padded tokens in one forward pass.
        """
        torch_device = resolve_device(device)
        finetuned = model if isinstance(model, FinetunedModel) else None
        spec = finetuned.spec if finetuned else ModelSpec.parse(model, tokenizer=tokenizer)
        tok = spec.load_tokenizer()
        instances = task.instances(split, limit)
        queries = [encode_pair(tok, context, c) for i in instances for context, c in i.pairs()]
        conditioned = len(queries)
        if task.unconditioned_context is not None:
            queries += [encode_pair(tok, task.unconditioned_context, c) for i in instances for c in i.continuations]

        # Scores reach the work dir batch by batch, so a killed run resumes where it stopped;
        # the journal is discarded if the queries or the weights are not those it was written for.
        journal = None
        if self.work_dir_for_run is not None:
            weights = finetuned.fingerprint if finetuned else None
            work = fingerprint([[list(q.context + q.continuation) for q in queries], weights])
            journal = Journal(self.work_dir_for_run / "scores.jsonl", work)
        known = journal.load() if journal else {}

        # Loaded once, in the scoring dtype, then moved to the device.
        lm = (finetuned.load_model(DTYPES[dtype]) if finetuned else spec.load_model(DTYPES[dtype]))
        lm = lm.to(torch_device).eval()
        self.logger.info("Scoring %d queries of %d instances on %s", len(queries), len(instances), torch_device)
        with Tqdm.tqdm(total=len(queries), initial=len(known), desc="Log-likelihood queries") as progress:
            logliks = score_queries(
                lm,
                queries,
                pad_token_id=tok.pad_token_id,
                max_length=context_window(lm.config),
                max_batch_size=max_batch_size,
                max_batch_tokens=max_batch_tokens,
                progress=progress,
                known=known,
                on_batch=journal.append if journal else None,
            )

        predictions, start = [], 0
        for instance in instances:
            end = start + len(instance.continuations)
            record = {
                "id": instance.id,
                "label": instance.label,
                "logliks": logliks[start:end],
                "num_tokens": [len(q.continuation) for q in queries[start:end]],
                "num_chars": instance.answer_lengths(),
            }
            if instance.group is not None:
                record["group"] = instance.group
            if conditioned < len(queries):
                record["unconditioned_logliks"] = logliks[conditioned + start:conditioned + end]
            predictions.append(record)
            start = end
        return predictions
