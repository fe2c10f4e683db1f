"""The request kinds (:mod:`.base`): multiple choice, generation, documents' perplexity and
scored targets, one module each, registered on import; the first two are trained on too
(:mod:`.objective`)."""

from .base import KINDS, RequestKind, RequestSetting, conversational_kinds, kind_named, kind_of_record, kind_of_records, kind_of_task
from .documents import Documents
from .generation import Generation
from .multiple_choice import MultipleChoice
from .objective import TrainingObjective
from .targets import Targets

__all__ = [
    "KINDS", "Documents", "Generation", "MultipleChoice", "RequestKind", "RequestSetting", "Targets", "TrainingObjective",
    "conversational_kinds", "kind_named", "kind_of_record", "kind_of_records", "kind_of_task",
]
