from typing import TYPE_CHECKING, Any, List, Optional

from tango.common.exceptions import ConfigurationError

from .instance import DataError, MCInstance, Row
from .task import MultipleChoiceTask

if TYPE_CHECKING:
    import datasets

SUBJECTS = (
    "abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology college_chemistry "
    "college_computer_science college_mathematics college_medicine college_physics computer_security "
    "conceptual_physics econometrics electrical_engineering elementary_mathematics formal_logic global_facts "
    "high_school_biology high_school_chemistry high_school_computer_science high_school_european_history "
    "high_school_geography high_school_government_and_politics high_school_macroeconomics high_school_mathematics "
    "high_school_microeconomics high_school_physics high_school_psychology high_school_statistics "
    "high_school_us_history high_school_world_history human_aging human_sexuality international_law jurisprudence "
    "logical_fallacies machine_learning management marketing medical_genetics miscellaneous moral_disputes "
    "moral_scenarios nutrition philosophy prehistory professional_accounting professional_law professional_medicine "
    "professional_psychology public_relations security_studies sociology us_foreign_policy virology world_religions"
).split()


@MultipleChoiceTask.register("mmlu")
class MmluTask(MultipleChoiceTask):
    """MMLU (Hendrycks et al., 2021): 57 subjects of 4-choice exam questions, as
    lm-evaluation-harness's ``mmlu`` (``formulation: "mc"``, the default: the lettered choices
    in the prompt, the letter scored) and ``mmlu_continuation`` (``"cloze"``:
    ``Question: ...\\nAnswer:`` and each answer scored), each subject's prompt opening with
    "The following are [multiple choice] questions (with answers) about {subject}.".

    ``subjects`` picks some of the 57 (all by default). One task covers them all: instances
    carry their subject as ``group``, so metrics come per subject and macro-averaged beside the
    overall accuracy, and 5-shot demonstrations are the first rows of the subject's ``dev``
    split, as lm-evaluation-harness and the MMLU paper do. The hub copy (``cais/mmlu``, config
    ``all``) has splits ``test`` (scored in published numbers), ``validation`` and ``dev``;
    local files need the same fields (``question``, ``subject``, ``choices``, ``answer``).
    """

    HUB_ID = "cais/mmlu"
    HUB_CONFIG = "all"
    HUB_SPLITS = {"test": "test", "validation": "validation", "dev": "dev"}
    LABEL_FIELD = "answer"
    UNCONDITIONED_CONTEXT = "Answer:"
    FEWSHOT_SPLIT = "dev"
    FEWSHOT_SAMPLER = "first"
    GROUP_FIELD = "subject"
    DEFAULT_FORMULATION = "mc"

    def __init__(self, subjects: Optional[List[str]] = None, **kwargs: Any) -> None:
        unknown = sorted(set(subjects or []) - set(SUBJECTS))
        if unknown:
            raise ConfigurationError(f"Unknown MMLU subjects: {', '.join(unknown)} (the 57 are: {', '.join(SUBJECTS)})")
        if subjects is not None and not subjects:
            raise ConfigurationError("subjects is empty: leave it out for all 57")
        self.subjects = sorted(set(subjects)) if subjects else list(SUBJECTS)
        super().__init__(**kwargs)

    def settings(self) -> Any:
        return self.subjects

    def row_numbers(self, rows: "datasets.Dataset", source: str) -> List[int]:
        if self.GROUP_FIELD not in rows.column_names:
            raise DataError(f"{source}: MMLU rows need a '{self.GROUP_FIELD}' field")
        numbers = []
        for number, subject in enumerate(rows[self.GROUP_FIELD]):
            if subject not in SUBJECTS:
                row = Row(rows[number], source, number + 1)
                raise row.error("subject", f"is not an MMLU subject (got {subject!r})")
            if subject in self.subjects:
                numbers.append(number)
        return numbers

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        choices = row.get("choices", list)
        if len(choices) < 2:
            raise row.error("choices", f"needs at least 2 choices (got {choices!r})")
        return MCInstance(
            id=instance_id,
            context=f"Question: {row.get('question').strip()}\nAnswer:",
            continuations=[f" {choice}" for choice in choices],
            label=row.get("answer", int),
        )

    def mc_question(self, row: Row, cloze: MCInstance) -> str:
        return row.get("question").strip()  # lm-evaluation-harness's mmlu has no "Question:" here

    def description(self, row: Row) -> str:
        kind = "multiple choice questions" if self.formulation == "mc" else "questions"
        return f"The following are {kind} (with answers) about {row.get('subject').replace('_', ' ')}.\n\n"
