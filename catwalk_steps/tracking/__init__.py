"""Experiment tracking: training curves and results in Weights & Biases and TensorBoard.

Trackers only observe: their settings are outside every cache key, and nothing they do (a
server that does not answer, a missing login, a crashed W&B service) fails a run (see
:mod:`.wandb_run`). ``wandb`` and ``tensorboard`` are an optional extra, imported only when a
run asks for them.
"""
