from .base import Task
from .arc import ArcChallengeTask, ArcEasyTask, CommonsenseQATask, OpenBookQATask
from .generative import GenerationTask, GenerativeTask
from .gsm8k import Gsm8kTask
from .hellaswag import HellaSwagTask
from .lm_eval_bridge import LmEvalTask
from .mmlu import MmluTask
from .piqa import PiqaTask
from .qa import SquadTask, TriviaQATask
from .sciq import SciQTask
from .siqa import SocialIQaTask
from .superglue import BoolQTask, CopaTask
from .instance import DataError, DocumentInstance, GenerationInstance, MCInstance, Row
from .task import MultipleChoiceTask
from .template import TemplateTask
from .winogrande import WinograndeTask

__all__ = [
    "ArcChallengeTask",
    "ArcEasyTask",
    "BoolQTask",
    "CommonsenseQATask",
    "CopaTask",
    "DataError",
    "DocumentInstance",
    "GenerationInstance",
    "GenerationTask",
    "GenerativeTask",
    "Gsm8kTask",
    "HellaSwagTask",
    "LmEvalTask",
    "MCInstance",
    "MmluTask",
    "MultipleChoiceTask",
    "OpenBookQATask",
    "PiqaTask",
    "Row",
    "SciQTask",
    "SocialIQaTask",
    "SquadTask",
    "Task",
    "TemplateTask",
    "TriviaQATask",
    "WinograndeTask",
]
