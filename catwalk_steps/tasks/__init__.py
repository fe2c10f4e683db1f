from .piqa import PiqaTask
from .task import DataError, MCInstance, MultipleChoiceTask

__all__ = ["DataError", "MCInstance", "MultipleChoiceTask", "PiqaTask"]
