"""Tango steps that fine-tune language models and evaluate them on multiple-choice, generative
and perplexity tasks, as cached workflow steps.

The layers, from the top. Each imports only from the layers below it, and the folders of one
layer import nothing of each other (``tests/test_layers.py`` checks both, and that no modules
import each other in a circle; see docs/architecture.md)::

    train, evaluate, run, join, list_steps  the commands
    command_line, step_flags                the commands' flags (the steps' settings), tasks and step graphs
    steps                                   the registered Tango steps (thin)
    training, prediction                    what the workers run
    kinds                                   request kinds: requests, computation, records, metrics, training
    distributed, tracking                   starting the workers; W&B and TensorBoard
    models, tasks, reports                  weights and scores; tasks and prompts; statistics
    storage                                 the disk
    tango_fixes                             Tango 1.3.2's fixes (imports only Tango)

This module, the package's face, imports whatever it exports, and ``tango_fixes`` first.
"""

from . import tango_fixes  # noqa: F401  (patches Tango; must come first)
from .models.finetuned import FinetunedModel, FinetunedModelFormat
from .steps import (
    CalculateMetricsStep,
    CompareStep,
    ExportDiffStep,
    ExportModelStep,
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
    "ExportModelStep",
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
