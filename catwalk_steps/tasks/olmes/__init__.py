"""OLMES v0.1 (AI2's evaluation standard, oe-eval) as a task type: ``{type: "olmes", name: ALIAS}``."""

from .task import OlmesTask

__all__ = ["OlmesTask"]
