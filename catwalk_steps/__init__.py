"""Tango steps that fine-tune and evaluate causal LMs as rank-classification models."""

from . import compat  # noqa: F401  (patches Tango; must come first)
from .atomic import AtomicJsonFormat
from .export import ExportPredictionsStep
from .finetune import FinetuneStep
from .metrics import CalculateMetricsStep, PrintMetricsStep, TabulateMetricsStep
from .predict import PredictStep
from .tasks import MCInstance, MultipleChoiceTask, PiqaTask
from .weights import FinetunedModel, FinetunedModelFormat

__all__ = [
    "AtomicJsonFormat",
    "CalculateMetricsStep",
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
]
