"""The registered Tango steps. Each is thin: it checks its settings when the step graph is built,
then builds the work and hands it to the layers below."""

from .compare import CompareStep
from .export import ExportPredictionsStep
from .export_diff import ExportDiffStep
from .export_model import ExportModelStep
from .finetune import FinetuneStep
from .metrics import CalculateMetricsStep, PrintMetricsStep, TabulateMetricsStep
from .olmes import OlmesTableStep
from .predict import PredictStep

__all__ = [
    "CalculateMetricsStep",
    "CompareStep",
    "ExportDiffStep",
    "ExportModelStep",
    "ExportPredictionsStep",
    "FinetuneStep",
    "OlmesTableStep",
    "PredictStep",
    "PrintMetricsStep",
    "TabulateMetricsStep",
]
