"""Scoring a split's queries on several workers, each journaling what it scored."""
