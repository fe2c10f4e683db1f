from .arc import ArcChallengeTask, ArcEasyTask, OpenBookQATask
from .hellaswag import HellaSwagTask
from .piqa import PiqaTask
from .sciq import SciQTask
from .superglue import BoolQTask, CopaTask
from .task import DataError, MCInstance, MultipleChoiceTask, Row
from .template import TemplateTask
from .winogrande import WinograndeTask

__all__ = [
    "ArcChallengeTask",
    "ArcEasyTask",
    "BoolQTask",
    "CopaTask",
    "DataError",
    "HellaSwagTask",
    "MCInstance",
    "MultipleChoiceTask",
    "OpenBookQATask",
    "PiqaTask",
    "Row",
    "SciQTask",
    "TemplateTask",
    "WinograndeTask",
]
