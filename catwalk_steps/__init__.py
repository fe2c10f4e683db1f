"""Tango steps that fine-tune and evaluate language models as rank-classification models.

The layers, from the top (each imports only from the ones below it; see docs/architecture.md):
``steps`` (the registered Tango steps) -> ``training``, ``prediction`` -> ``distributed`` ->
``models``, ``tasks``, ``reports`` -> ``storage``. ``tango_fixes`` patches Tango 1.3.2.
"""

from . import tango_fixes  # noqa: F401  (patches Tango; must come first)
from .models.finetuned import FinetunedModel, FinetunedModelFormat
from .steps import (
    CalculateMetricsStep,
    CompareStep,
    ExportDiffStep,
    ExportPredictionsStep,
    FinetuneStep,
    PredictStep,
    PrintMetricsStep,
    TabulateMetricsStep,
)
from .storage.atomic import AtomicJsonFormat
from .tasks import MCInstance, MultipleChoiceTask, PiqaTask, Task

__all__ = [
    "AtomicJsonFormat",
    "CalculateMetricsStep",
    "CompareStep",
    "ExportDiffStep",
    "ExportPredictionsStep",
    "FinetuneStep",
    "FinetunedModel",
    "FinetunedModelFormat",
    "MCInstance",
    "MultipleChoiceTask",
    "PiqaTask",
    "PredictStep",
    "PrintMetricsStep",
    "TabulateMetricsStep",
    "Task",
]
