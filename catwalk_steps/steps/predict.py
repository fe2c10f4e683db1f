"""``catwalk::predict``: score every answer choice of a task split by log-likelihood."""

from contextlib import nullcontext
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from tango import Step
from tango.common.exceptions import ConfigurationError
from tango.step import StepResources

from ..distributed.devices import check_device_setting, gpu_count, worker_devices
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec, context_window, with_model_names
from ..models.scoring import encode_pair
from ..prediction.generation_records import generation_records, generation_requests
from ..prediction.perplexity_records import document_queries, perplexity_records, target_queries, target_records
from ..prediction.workers import PredictionJob, run_on_workers, strided_shards
from ..storage.atomic import AtomicJsonFormat
from ..storage.hashing import fingerprint
from ..tango_fixes.class_paths import keep_class_path
from ..tasks import Task


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def top_two_margin(logliks: Sequence[float]) -> float:
    """How far the chosen answer's log-likelihood is ahead of the runner-up's: a decision with a
    margin within the batching tolerance (README) may flip with the batch size or device count."""
    first, second = sorted(logliks, reverse=True)[:2]
    return first - second


def query_work(queries: Sequence[Any], finetuned: Optional[FinetunedModel]) -> str:
    """What scoring ``queries`` with these weights is, for journals: a journal written for other
    queries or other weights is discarded."""
    return fingerprint([[list(q.context + q.continuation) for q in queries], finetuned and finetuned.fingerprint])


@Step.register("catwalk::predict")
@keep_class_path("catwalk_steps.predict.PredictStep")
class PredictStep(Step):
    """Scores each choice of each instance of ``task``'s ``split`` with ``model``, or, for a
    generative task, generates each instance's answer greedily and scores it.

    ``model`` is a spec (``rc::gpt2``) for a stock pretrained model, or the result of
    ``catwalk::finetune``. The result is one JSON-safe record per instance: its id, gold label,
    group (if the task has groups), and per choice the summed log-likelihood, token count and
    the character count of the answer text (without the target delimiter, as
    lm-evaluation-harness's ``acc_norm`` counts), and, with ``unconditioned`` for tasks with an
    ``unconditioned_context``, the log-likelihood after that context alone; and the ``margin``
    between its two best summed log-likelihoods. From these
    :class:`CalculateMetricsStep` derives every metric without scoring again. A generative
    task's record holds its id, the prompt's token count and whether it was cut from the left
    (``truncated``), the ``generation``, the ``references``, the task's per-instance ``scores``
    (``exact_match``, ``f1``, ...) and the ``margin`` of its closest greedy decision
    (:mod:`..prediction.generation_records`). A perplexity task's record holds a document's id,
    summed log-likelihood over its rolling windows (``loglik``), and its ``num_tokens``,
    ``num_words`` and ``num_bytes``; LAMBADA's, the target's ``loglik``, ``is_greedy`` and
    ``num_tokens`` (:mod:`..prediction.perplexity_records`).

    ``device_count`` workers score strided shards of the split (:mod:`..prediction.workers`). The
    device count, the device and the batching knobs change how fast, not what, so they are not in
    the cache key: batching moves a log-likelihood by padding alone, within the tolerance the
    README states, and flips only decisions whose margin is within it.
    """

    VERSION = "cw3"  # cw2: num_chars without the target delimiter; group; margin. cw3: unconditioned
    FORMAT = AtomicJsonFormat()
    SKIP_ID_ARGUMENTS = {"device", "device_count", "max_batch_size", "max_batch_tokens"}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        if kwargs.get("max_batch_size", 1) < 1 or kwargs.get("max_batch_tokens", 1) < 1:
            raise ConfigurationError("max_batch_size and max_batch_tokens must be positive")
        check_device_setting(kwargs.get("device", "auto"), kwargs.get("device_count", 1))
        if kwargs.get("dtype", "float32") not in DTYPES:
            raise ConfigurationError(f"dtype must be one of {', '.join(DTYPES)}, got {kwargs['dtype']!r}")
        if isinstance(kwargs.get("model"), str):
            ModelSpec.parse(kwargs["model"])
        return with_model_names(kwargs)

    @property
    def resources(self) -> StepResources:
        return self.step_resources or StepResources(gpu_count=gpu_count(self.kwargs))

    def clean_work_dir(self, work_dir: Path) -> None:
        """Called once the predictions are in the cache: their journals go."""
        for journal in work_dir.glob("*-*.jsonl"):
            journal.unlink()

    def run(  # type: ignore[override]
        self,
        model: Union[str, FinetunedModel],
        task: Task,
        *,
        split: str = "validation",
        limit: Optional[int] = None,
        tokenizer: Optional[str] = None,
        device: str = "auto",
        device_count: int = 1,
        dtype: str = "float32",
        unconditioned: bool = False,
        max_batch_size: int = 32,
        max_batch_tokens: int = 16384,
    ) -> List[Dict[str, Any]]:
        """
        :param limit: score only the first ``limit`` instances.
        :param tokenizer: for a model spec, the tokenizer if not the model's own.
        :param device: ``"auto"`` (CUDA if present, else CPU), or a torch device such as ``"cuda:1"``;
            with several workers ``"auto"``, ``"cuda"`` or ``"cpu"``.
        :param device_count: workers scoring the split: CUDA devices 0..N-1, or CPU processes
            sharing out the cores. Not in the cache key: the predictions are the same.
        :param dtype: the weights' dtype while scoring: ``"bfloat16"`` or ``"float16"`` for speed on
            GPUs (log-probabilities are still normalised in float32). Part of the cache key.
        :param unconditioned: also score every choice after the task's ``unconditioned_context``
            (e.g. ``"Answer:"``; tasks without one ignore this), for ``acc_uncond``. Off by
            default: it doubles the work, and lm-evaluation-harness reports it for few tasks.
        :param max_batch_size: most queries (context, continuation pairs), or prompts being
            generated from, in one forward pass.
        :param max_batch_tokens: most padded tokens in one scoring forward pass.
        """
        devices = worker_devices(device, device_count)
        finetuned = model if isinstance(model, FinetunedModel) else None
        spec = finetuned.spec if finetuned else ModelSpec.parse(model, tokenizer=tokenizer)
        instances = task.instances(split, limit)  # a bad data file fails the step before anything is loaded
        tok = spec.load_tokenizer()
        job = dict(spec=spec, finetuned=finetuned, devices=devices, dtype=DTYPES[dtype], pad_token_id=tok.pad_token_id,
                   max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)
        if task.REQUEST_TYPE == "generate_until":
            max_length = context_window(spec.load_config())
            requests = generation_requests(tok, instances, max_length)
            self.logger.info("Generating for %d instances on %s", len(instances), ", ".join(map(str, devices)))
            work = [[[list(r.prompt), r.until, r.max_new_tokens] for r in requests], finetuned and finetuned.fingerprint]
            generations = self._run_journaled(
                requests=requests, shards=strided_shards(range(len(requests)), len(devices)), kind="generations",
                work=fingerprint(work), **job,
            )
            return generation_records(task, instances, requests, generations, max_length)
        if task.REQUEST_TYPE in ("loglikelihood_rolling", "loglikelihood"):
            return self._score_whole(task.REQUEST_TYPE, instances, spec, tok, job)
        queries = [encode_pair(tok, context, c) for i in instances for context, c in i.pairs()]
        instance_of = [n for n, i in enumerate(instances) for _ in i.continuations]
        conditioned = len(queries)
        if unconditioned and task.unconditioned_context is not None:
            queries += [encode_pair(tok, task.unconditioned_context, c) for i in instances for c in i.continuations]
            instance_of += instance_of

        self.logger.info(
            "Scoring %d queries of %d instances on %s", len(queries), len(instances), ", ".join(map(str, devices))
        )
        work = query_work(queries, finetuned)
        logliks = self._run_journaled(requests=queries, shards=strided_shards(instance_of, len(devices)), work=work, **job)

        predictions, start = [], 0
        for instance in instances:
            end = start + len(instance.continuations)
            record = {
                "id": instance.id,
                "label": instance.label,
                "logliks": logliks[start:end],
                "num_tokens": [len(q.continuation) for q in queries[start:end]],
                "num_chars": instance.answer_lengths(),
                "margin": top_two_margin(logliks[start:end]),
            }
            if instance.group is not None:
                record["group"] = instance.group
            if conditioned < len(queries):
                record["unconditioned_logliks"] = logliks[conditioned + start:conditioned + end]
            predictions.append(record)
            start = end
        return predictions

    def _score_whole(
        self, request_type: str, instances: List[Any], spec: ModelSpec, tok: Any, job: Dict[str, Any]
    ) -> List[Dict[str, Any]]:
        """Records of a perplexity task's documents (``loglikelihood_rolling``: every rolling
        window a query) or of (context, target) instances scored with a greedy flag
        (``loglikelihood``). Causal LMs only."""
        config = spec.load_config()
        if config.is_encoder_decoder:
            raise ConfigurationError(
                f"{spec.pretrained} is an encoder-decoder model: {request_type} requests (perplexity, "
                "LAMBADA) are computed here for causal language models only"
            )
        rolling = request_type == "loglikelihood_rolling"
        queries, instance_of = (
            document_queries(tok, instances, context_window(config)) if rolling else target_queries(tok, instances)
        )
        self.logger.info("Scoring %d %s of %d instances on %s", len(queries), "windows" if rolling else "targets",
                         len(instances), ", ".join(map(str, job["devices"])))
        work = query_work(queries, job["finetuned"])
        results = self._run_journaled(requests=queries, shards=strided_shards(instance_of, len(job["devices"])),
                                      kind="scores" if rolling else "greedy_scores", work=work, **job)
        if rolling:
            return perplexity_records(instances, queries, instance_of, results)
        return target_records(instances, queries, results)

    def _run_journaled(self, **job: Any) -> List[Any]:
        """The results of a :class:`PredictionJob` of these settings. They reach the work dir batch by batch, so a killed run resumes
        where it stopped; journals are discarded if the requests or the weights are not those
        they were written for. Called directly (not through a workspace), run() journals into a
        temporary directory."""
        work_dir = self.work_dir_for_run
        with nullcontext(work_dir) if work_dir else TemporaryDirectory(prefix="catwalk-predict-") as journals:
            return run_on_workers(PredictionJob(work_dir=Path(journals), **job))
