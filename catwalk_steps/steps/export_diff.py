"""``catwalk::export_diff``: which questions changed between two models' predictions."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..kinds import kind_of_records, kind_of_task
from ..models.chat_templates import template_renderer
from ..models.finetuned import FinetunedModel
from ..models.loading import ModelSpec
from ..reports.diffs import diff_markdown, diff_records
from ..storage.atomic import publish_text
from ..tasks.base import Task, check_limit, check_split
from ..tasks.chat import ChatSettings
from .compare import check_same_evaluation
from .export import check_output_dir
from .predict import PredictStep


#: The baseline ``catwalk::predict`` step's settings that write its prompts under a chat template.
CHAT_SETTINGS = ("model", "apply_chat_template", "system_instruction", "fewshot_as_multiturn")


@Step.register("catwalk::export_diff")
class ExportDiffStep(Step):
    """Writes into ``output_dir``, for a compared pair of ``catwalk::predict`` results of the same
    instances, each file replaced atomically:

    - ``diff.jsonl``: each instance whose correctness under ``metric`` differs: id, prompt, gold
      answer, and each side's pick and margins (:mod:`..reports.diffs`);
    - ``diff.md``: counts of wins, losses and ties, and the 20 largest swings of the gold answer's
      margin.

    The prompts come from ``task`` (with ``split`` and ``limit``, and under the chat template the
    predictions were made with), by default the baseline ``catwalk::predict`` step's own. Not
    cached: it rewrites the files from cached results.
    """

    CACHEABLE = False
    # Left at their defaults (predictions made without a chat template), the step keeps its id.
    SKIP_DEFAULT_ARGUMENTS = {"model": None, "apply_chat_template": False, "system_instruction": None,
                              "fewshot_as_multiturn": None}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        check_output_dir(kwargs.get("output_dir", ""))
        check_limit("limit", kwargs.get("limit"))
        baseline = kwargs.get("baseline")
        check_same_evaluation(baseline, kwargs.get("candidate"))
        if kwargs.get("task") is None and isinstance(baseline, PredictStep):
            kwargs = {**kwargs, "task": baseline.kwargs["task"]}
            kwargs.update({key: baseline.kwargs[key] for key in ("split", "limit") if key in baseline.kwargs})
            if baseline.kwargs.get("apply_chat_template", False) is not False:  # its prompts as it wrote them
                kwargs.update({key: baseline.kwargs[key] for key in CHAT_SETTINGS if key in baseline.kwargs})
        check_split("split", kwargs.get("task"), kwargs.get("split", "validation"))
        task = kwargs.get("task")
        if isinstance(task, Task) and not kind_of_task(task).diffable:
            raise ConfigurationError(
                f"catwalk::export_diff lists the instances a 0/1 metric changes on, and {type(task).__name__}'s "
                f"predictions ({kind_of_task(task).name}) have none: compare them with catwalk::compare instead"
            )
        return kwargs

    def run(  # type: ignore[override]
        self,
        output_dir: str,
        baseline: List[Dict[str, Any]],
        candidate: List[Dict[str, Any]],
        metric: Optional[str] = None,
        baseline_name: str = "baseline",
        candidate_name: str = "candidate",
        task: Optional[Any] = None,
        split: str = "validation",
        limit: Optional[int] = None,
        model: Optional[Union[str, FinetunedModel]] = None,
        apply_chat_template: Union[bool, str] = False,
        system_instruction: Optional[str] = None,
        fewshot_as_multiturn: Optional[bool] = None,
    ) -> str:
        """
        :param output_dir: where ``diff.jsonl`` and ``diff.md`` go; created if missing.
        :param baseline: a ``catwalk::predict`` result.
        :param candidate: another, of the same instances.
        :param metric: the 0/1 per-instance metric whose changes to list (``acc``, ``exact_match``,
            ...); by default the one a table's ``Δ`` column shows (the kind's
            ``headline_metric``): ``acc`` for choices and targets, ``exact_match`` (or the task's
            first 0/1 score, ``exact_match/strict-match``) for generations.
        :param baseline_name: how ``diff.md`` names the baseline.
        :param candidate_name: how ``diff.md`` names the candidate.
        :param task: the task the predictions are of, for the prompts and gold answers.
        :param model: with ``apply_chat_template`` (and ``system_instruction``,
            ``fewshot_as_multiturn``): the prompts as the baseline step wrote them, in this model's
            chat template (by default the baseline ``catwalk::predict`` step's settings).
        :returns: the directory written, as an absolute path.
        """
        kind = kind_of_records([*baseline, *candidate])
        chat = ChatSettings.of(apply_chat_template, system_instruction, fewshot_as_multiturn)
        settings = {}
        if chat is not None:
            spec = model.spec if isinstance(model, FinetunedModel) else ModelSpec.parse(model)
            settings["chat"] = chat.format(template_renderer(spec.load_tokenizer(), chat.template, spec.pretrained))
        instances = task.instances(split, limit, **settings) if task is not None else None
        texts = None if instances is None else {i.id: kind.instance_text(i) for i in instances}
        metric = metric or kind.headline_metric(baseline)  # the table's Δ metric
        if metric is None:
            raise ValueError(f"{kind.name} predictions have no per-instance 0/1 metric to diff")
        diff = diff_records(kind, baseline, candidate, metric, texts)
        out = Path(output_dir).resolve()
        out.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps(entry) + "\n" for entry in diff["changed"])
        publish_text(out / "diff.jsonl", lines)
        summary = diff_markdown(diff, baseline_name, candidate_name)
        publish_text(out / "diff.md", summary)
        self.logger.info("%d wins, %d losses, %d ties: %s", diff["wins"], diff["losses"], diff["ties"], out / "diff.md")
        return str(out)
