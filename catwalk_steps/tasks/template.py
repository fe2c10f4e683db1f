import string
from typing import Any, Dict, List, Optional

from tango.common.exceptions import ConfigurationError

from .instance import MCInstance, Row
from .task import MultipleChoiceTask


@MultipleChoiceTask.register("template")
class TemplateTask(MultipleChoiceTask):
    """A task defined in a config alone: local data files, a prompt template and field names.

    ``context`` is a ``str.format`` template over the row's fields, e.g.
    ``"Question: {question}\\nAnswer:"``. The choices are the fields named in ``choice_fields``,
    or the list in field ``choices_field``; each continuation is ``continuation_prefix`` + the
    choice. The gold index is field ``label_field``: an int, or, with ``label_values``, the
    position of its value in that list (e.g. ``["A", "B", "C", "D"]``). The few-shot and
    formulation settings of every task apply here too::

        task: {
          type: "template",
          data_files: { train: "train.jsonl", validation: "dev.jsonl" },
          context: "Question: {question}\\nAnswer:",
          choices_field: "options",
          label_field: "answer",
          label_values: ["A", "B", "C", "D"],
        }
    """

    def __init__(
        self,
        data_files: Dict[str, str],
        context: str,
        choice_fields: Optional[List[str]] = None,
        choices_field: Optional[str] = None,
        label_field: str = "label",
        label_values: Optional[List[Any]] = None,
        continuation_prefix: str = " ",
        **kwargs: Any,
    ) -> None:
        if not data_files:
            raise ConfigurationError("A template task needs data_files")
        if (choice_fields is None) == (choices_field is None):
            raise ConfigurationError("A template task needs exactly one of choice_fields and choices_field")
        if choice_fields is not None and len(choice_fields) < 2:
            raise ConfigurationError(f"choice_fields must name at least 2 fields (the choices), got {choice_fields}")
        if label_values is not None and not label_values:
            raise ConfigurationError("label_values is empty: list the label of each choice, or leave it out for "
                                     "an integer label")
        try:
            self.context_fields = [name for _, name, _, _ in string.Formatter().parse(context) if name]
        except ValueError as e:
            raise ConfigurationError(f"Bad context template {context!r}: {e}")
        super().__init__(data_files=data_files, **kwargs)
        self.context = context
        self.choice_fields = choice_fields
        self.choices_field = choices_field
        self.LABEL_FIELD = label_field
        self.label_values = label_values
        self.continuation_prefix = continuation_prefix

    def settings(self) -> Any:
        return (self.context, self.choice_fields, self.choices_field, self.LABEL_FIELD, self.label_values,
                self.continuation_prefix)

    def row_to_instance(self, row: Row, instance_id: str) -> MCInstance:
        fields = {name: row.get(name, object) for name in self.context_fields}
        if self.choices_field is not None:
            choices = row.get(self.choices_field, list)
        else:
            choices = [row.get(name) for name in self.choice_fields or []]
        if self.label_values is not None:
            label = row.index_of(self.LABEL_FIELD, self.label_values)
        else:
            label = row.get(self.LABEL_FIELD, int)
        return MCInstance(
            id=instance_id,
            context=self.context.format(**fields),
            continuations=[self.continuation_prefix + str(choice) for choice in choices],
            label=label,
            target_delimiter=self.continuation_prefix,
        )
