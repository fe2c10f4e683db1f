"""The request kinds (:mod:`.base`): multiple choice, generation, documents' perplexity and
scored targets, one module each, registered on import."""

from .base import KINDS, RequestKind, RequestSetting, kind_named, kind_of_record, kind_of_records, kind_of_task
from .documents import Documents
from .generation import Generation
from .multiple_choice import MultipleChoice
from .targets import Targets

__all__ = [
    "KINDS", "Documents", "Generation", "MultipleChoice", "RequestKind", "RequestSetting", "Targets",
    "kind_named", "kind_of_record", "kind_of_records", "kind_of_task",
]
