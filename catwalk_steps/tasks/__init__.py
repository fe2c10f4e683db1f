from .base import Task
from .arc import ArcChallengeTask, ArcEasyTask, CommonsenseQATask, OpenBookQATask
from .generative import GenerationTask, GenerativeTask
from .gsm8k import Gsm8kTask
from .hellaswag import HellaSwagTask
from .lambada import LambadaTask
from .lm_eval_bridge import LmEvalTask
from .mmlu import MmluTask
from .olmes import OlmesTask
from .perplexity import DocumentTask, PerplexityTask, WikiTextTask
from .piqa import PiqaTask
from .qa import SquadTask, TriviaQATask
from .sciq import SciQTask
from .siqa import SocialIQaTask
from .superglue import BoolQTask, CopaTask
from .instance import DataError, DocumentInstance, GenerationInstance, MCInstance, Row, TargetInstance
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
    "DocumentTask",
    "GenerationInstance",
    "GenerationTask",
    "GenerativeTask",
    "Gsm8kTask",
    "HellaSwagTask",
    "LambadaTask",
    "LmEvalTask",
    "MCInstance",
    "MmluTask",
    "MultipleChoiceTask",
    "OlmesTask",
    "OpenBookQATask",
    "PerplexityTask",
    "PiqaTask",
    "Row",
    "SciQTask",
    "SocialIQaTask",
    "SquadTask",
    "TargetInstance",
    "Task",
    "TemplateTask",
    "TriviaQATask",
    "WikiTextTask",
    "WinograndeTask",
]
