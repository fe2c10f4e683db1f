"""``catwalk::predict``: score every answer choice of a task split by log-likelihood (or generate,
or score documents): the step reads its settings into a :class:`..prediction.plan.PredictionPlan`
and hands it to :func:`..prediction.plan.predictions`."""

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from tango import Step
from tango.common.exceptions import ConfigurationError
from tango.step import StepResources

from ..distributed.devices import check_device_setting, gpu_count, worker_devices
from ..kinds import conversational_kinds, kind_of_task
from ..kinds.preference import check_reference_model, with_reference_logps
from ..models.batch_budget import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, check_batch_tokens
from ..models.chat_templates import check_evaluated_template, check_model_template
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec, with_model_names
from ..prediction.plan import PredictionPlan, predictions
from ..prediction.vllm_engine import check_backend
from ..storage.atomic import AtomicJsonFormat
from ..tango_fixes.class_paths import keep_class_path
from ..tasks import Task
from ..tasks.chat import ChatSettings, check_chat_settings
from ..tasks.base import check_limit, check_prompts, check_split, holds_conversations


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    (:mod:`..kinds.generation`). A perplexity task's record holds a document's id,
    summed log-likelihood over its rolling windows (``loglik``), and its ``num_tokens``,
    ``num_words`` and ``num_bytes``; LAMBADA's, the target's ``loglik``, ``is_greedy`` and
    ``num_tokens`` (:mod:`..kinds.documents`, :mod:`..kinds.targets`). Every record
    also says its request ``kind`` (:mod:`..kinds`) and its ``num_shots``.

    ``device_count`` workers score strided shards of the split (:mod:`..prediction.workers`). The
    device count, the device and the batching knobs change how fast, not what, so they are not in
    the cache key: batching moves a log-likelihood by padding alone, within the tolerance the
    README states, and flips only decisions whose margin is within it.
    """

    VERSION = "cw3"  # cw2: num_chars without the target delimiter; group; margin. cw3: unconditioned
    FORMAT = AtomicJsonFormat()
    SKIP_ID_ARGUMENTS = {"device", "device_count", "max_batch_size", "max_batch_tokens", "allow_other_template"}
    SKIP_DEFAULT_ARGUMENTS = {
        "add_bos_token": None, "apply_chat_template": False, "system_instruction": None, "fewshot_as_multiturn": None,
        "log_requests": False, "reference_model": None, "backend": "hf", "vllm_args": None,
    }

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        if kwargs.get("max_batch_size", 1) < 1:
            raise ConfigurationError("max_batch_size and max_batch_tokens must be positive")
        check_batch_tokens(kwargs.get("max_batch_tokens", 1))
        check_device_setting(kwargs.get("device", "auto"), kwargs.get("device_count", 1))
        check_limit("limit", kwargs.get("limit"))
        check_split("split", kwargs.get("task"), kwargs.get("split", "validation"))
        if kwargs.get("dtype", "float32") not in DTYPES:
            raise ConfigurationError(f"dtype must be one of {', '.join(DTYPES)}, got {kwargs['dtype']!r}")
        if isinstance(kwargs.get("model"), str):
            ModelSpec.parse(kwargs["model"])
        check_reference_model(kwargs)
        task, split = kwargs.get("task"), kwargs.get("split", "validation")
        kind = getattr(task, "REQUEST_TYPE", None)
        conversations = holds_conversations(task, split)
        check_evaluated_template(kwargs, prompted=kind is None or kind in conversational_kinds(),
                                 conversations=conversations)
        check_chat_settings(kwargs, [task], conversational_kinds())
        check_model_template(kwargs, conversations)  # a tokenizer without a template named before the data asks for one
        check_prompts(task, split, kwargs["apply_chat_template"] is not False)
        check_logged_requests(kwargs)
        check_backend(kwargs.get("backend", "hf"), task, kwargs.get("vllm_args"))
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
        add_bos_token: Optional[bool] = None,
        apply_chat_template: Union[bool, str, None] = None,
        allow_other_template: bool = False,
        system_instruction: Optional[str] = None,
        fewshot_as_multiturn: Optional[bool] = None,
        device: str = "auto",
        device_count: int = 1,
        dtype: str = "float32",
        unconditioned: bool = False,
        log_requests: bool = False,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: Union[int, str] = DEFAULT_MAX_BATCH_TOKENS,
        reference_model: Union[str, FinetunedModel, None] = None,
        backend: str = "hf",
        vllm_args: Optional[Dict[str, Any]] = None,
    ) -> List[Dict[str, Any]]:
        """
        :param split: the split of ``task`` to score.
        :param limit: score only the first ``limit`` instances.
        :param tokenizer: for a model spec, the tokenizer if not the model's own.
        :param add_bos_token: special tokens when encoding (:mod:`..models.conventions`): unset, the
            tokenizer's own (Llama, Mistral and Gemma add BOS), as lm-evaluation-harness 0.4.13 at its
            defaults; ``true``/``false`` force them on or off. Unset for a fine-tuned model: the
            setting it was trained with.
        :param apply_chat_template: prompts as conversations in the tokenizer's chat template
            (``true``) or the one of its templates so named, as lm-evaluation-harness's
            ``--apply_chat_template`` builds them (:mod:`..tasks.chat`): for multiple-choice,
            generative and loglikelihood (LAMBADA) tasks, native and ``lm_eval`` alike; not for
            perplexity's documents, which have no prompt. Unset: the template a fine-tuned model
            was trained under (for tasks with prompts), else none.
        :param allow_other_template: evaluate a model fine-tuned under a chat template without it,
            or under another (refused otherwise: its prompts would be text it never saw). Not for
            conversations, which need a template whatever the model.
        :param system_instruction: with a template, the system turn (before the task's description).
        :param fewshot_as_multiturn: with a template, each demonstration a user and an assistant turn
            (unset: ``true``, as lm-evaluation-harness 0.4.10+), else all folded into one user turn.
        :param device: ``"auto"`` (CUDA if present, else CPU), or a torch device such as ``"cuda:1"``;
            with several workers ``"auto"``, ``"cuda"`` or ``"cpu"``.
        :param device_count: workers scoring the split: CUDA devices 0..N-1, or CPU processes
            sharing out the cores. Not in the cache key: the predictions are the same.
        :param dtype: the weights' dtype while scoring: ``"bfloat16"`` or ``"float16"`` for speed on
            GPUs (log-probabilities are still normalised in float32). Part of the cache key.
        :param unconditioned: also score every choice after the task's ``unconditioned_context``
            (e.g. ``"Answer:"``; tasks without one ignore this), for ``acc_uncond``. Off by
            default: it doubles the work, and lm-evaluation-harness reports it for few tasks.
        :param log_requests: each multiple-choice record also holds its ``requests``, each choice's
            ``[context, continuation]`` in choice order (and ``unconditioned_requests``, where
            scored), as lm-evaluation-harness's ``--log_samples`` keeps its arguments.
        :param max_batch_size: most queries (context, continuation pairs), or prompts being
            generated from, in one forward pass.
        :param max_batch_tokens: most padded tokens one forward pass holds, key/value cache
            included (choices sharing a context each hold a copy of its cache, so each counts it;
            a generated row counts its prompt and budget), or ``"auto"``: as many as the memory
            left on each worker's device once the model is loaded holds, less a margin
            (:mod:`..models.batch_budget`).
        :param reference_model: preference tasks: a model spec or fine-tuned model whose
            log-probabilities of each pair's answers each record holds too (``reference_logps``),
            for DPO's implicit-reward metrics against it (:mod:`..kinds.preference`), e.g. the model
            DPO started from; scored with the same tokens and settings.
        :param backend: what generates a generative task's answers: ``"hf"``, transformers, or
            ``"vllm"``, vLLM's engine, as lm-evaluation-harness's ``--model vllm`` runs it
            (:mod:`..prediction.vllm_engine`; generation only, vLLM installed apart:
            docs/install.md). Part of the cache key: two engines may break a near-tie differently.
        :param vllm_args: with ``backend: "vllm"``, settings for vLLM's engine (``vllm.LLM``'s
            arguments: ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_num_seqs``, ...);
            on CPU its KV cache is 1 GiB unless ``VLLM_CPU_KVCACHE_SPACE`` says otherwise. Part of
            the cache key.
        """
        def spec_of(model: Union[str, FinetunedModel]) -> Tuple[ModelSpec, Optional[FinetunedModel]]:
            finetuned = model if isinstance(model, FinetunedModel) else None
            spec = finetuned.spec if finetuned else ModelSpec.parse(model, tokenizer=tokenizer)
            return (spec if add_bos_token is None else replace(spec, add_bos_token=add_bos_token)), finetuned

        spec, finetuned = spec_of(model)
        if apply_chat_template is None:
            apply_chat_template = spec.chat_template or False
        plan = PredictionPlan(
            spec=spec, finetuned=finetuned,
            task=task, split=split, limit=limit, devices=worker_devices(device, device_count), dtype=DTYPES[dtype],
            unconditioned=unconditioned, chat=ChatSettings.of(apply_chat_template, system_instruction, fewshot_as_multiturn),
            max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens,
            journals=self.work_dir_for_run,  # None when run() is called directly
            log_requests=log_requests,
            backend=backend, vllm_args=vllm_args,
        )
        records = predictions(plan)
        if reference_model is None:
            return records
        reference_spec, reference_finetuned = spec_of(reference_model)
        journals = plan.journals and plan.journals / "reference"
        if journals:
            journals.mkdir(exist_ok=True)
        reference = predictions(replace(plan, spec=reference_spec, finetuned=reference_finetuned, journals=journals))
        return with_reference_logps(records, reference)


def check_logged_requests(kwargs: Dict[str, Any]) -> None:
    """Refuses ``log_requests`` for a task whose requests are not text pairs, at graph build."""
    task = kwargs.get("task")
    if kwargs.get("log_requests") and isinstance(task, Task) and not kind_of_task(task).logs_requests:
        raise ConfigurationError(f"log_requests: {type(task).__name__}'s {kind_of_task(task).name} requests are not "
                                 "logged (multiple-choice ones are): leave it out")
