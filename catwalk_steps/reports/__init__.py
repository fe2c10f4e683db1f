"""Turning predictions and metrics into numbers, tables and charts for people."""
