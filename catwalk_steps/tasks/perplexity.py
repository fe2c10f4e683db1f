"""Perplexity tasks: documents scored whole by rolling log-likelihood (lm-evaluation-harness's
``loglikelihood_rolling``), as :class:`DocumentInstance` objects.

``{type: "perplexity", data_files: {split: path}}`` reads any local JSONL of ``{"text": str}``
lines; ``wikitext`` is WikiText-2 (raw) at document level as lm-evaluation-harness builds it.
Words and bytes are counted on the row's text as stored, before any detokenisation, with
lm-evaluation-harness's rules (words: ``len(re.split(r"\\s+", text))``; bytes: UTF-8).
"""

import re

from .base import Task
from .instance import DocumentInstance, Row
from .row_task import RowTask


def count_words(text: str) -> int:
    """lm-evaluation-harness's word count (``Task.count_words``)."""
    return len(re.split(r"\s+", text))


class DocumentTask(RowTask):
    """A task whose rows are documents; subclasses name the text field and may rewrite the text
    the model reads (:meth:`model_text`)."""

    REQUEST_TYPE = "loglikelihood_rolling"
    TEXT_FIELD = "text"

    def row_instance(self, row: Row, instance_id: str) -> DocumentInstance:
        text = row.get(self.TEXT_FIELD)
        if not text.strip():
            raise row.error(self.TEXT_FIELD, "is an empty document (only whitespace): there is nothing to score")
        return DocumentInstance(
            id=instance_id, text=self.model_text(text), num_words=count_words(text), num_bytes=len(text.encode("utf-8"))
        )

    def model_text(self, text: str) -> str:
        """The text the model scores; the row's own by default."""
        return text


@Task.register("perplexity")
class PerplexityTask(DocumentTask):
    """Any local JSONL (or json/csv/parquet) of ``{"text": str}`` rows, each a document; local
    ``data_files`` only. A row without text, or with an empty one, is a ``DataError`` naming the
    file, the row and the field, raised before any model loads."""


@Task.register("wikitext")
class WikiTextTask(DocumentTask):
    """WikiText-2 (raw), one Wikipedia article per document, as lm-evaluation-harness's
    ``wikitext`` task: the hub's ``EleutherAI/wikitext_document_level`` (``wikitext-2-raw-v1``),
    field ``page``, detokenised before scoring by lm-evaluation-harness's ``wikitext_detokenizer``
    (:func:`wikitext_detokenizer`); words and bytes counted on the page as stored. Its published
    numbers are on the ``test`` split."""

    HUB_ID = "EleutherAI/wikitext_document_level"
    HUB_CONFIG = "wikitext-2-raw-v1"
    HUB_SPLITS = {"train": "train", "validation": "validation", "test": "test"}
    TEXT_FIELD = "page"

    def model_text(self, text: str) -> str:
        return wikitext_detokenizer(text)


def wikitext_detokenizer(string: str) -> str:
    """Undoes WikiText's tokenisation (``@-@``, spaces around punctuation and brackets, ...):
    lm-evaluation-harness's ``tasks/wikitext/preprocess_wikitext.py``, rule for rule, so that the
    model reads the same text (lm_eval is an optional dependency here, hence the copy)."""
    # contractions
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    # number separators
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    # punctuation
    for mark in (":", ";", ".", "!", "?", ","):
        string = string.replace(f" {mark} ", f"{mark} ")
    # double brackets
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    # miscellaneous
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")
    return string
