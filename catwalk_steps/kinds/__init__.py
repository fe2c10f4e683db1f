"""The request kinds (:mod:`.base`): multiple choice, generation, documents' perplexity, scored
targets and preference pairs, one module each, registered on import; multiple choice, generation
and preference pairs are trained on too (:mod:`.objective`)."""

from .base import KINDS, RequestKind, RequestSetting, conversational_kinds, kind_named, kind_of_record, kind_of_records, kind_of_task
from .documents import Documents
from .generation import Generation
from .multiple_choice import MultipleChoice
from .objective import TrainingObjective
from .preference import Preference
from .targets import Targets

__all__ = [
    "KINDS", "Documents", "Generation", "MultipleChoice", "Preference", "RequestKind", "RequestSetting", "Targets", "TrainingObjective",
    "conversational_kinds", "kind_named", "kind_of_record", "kind_of_records", "kind_of_task",
]
