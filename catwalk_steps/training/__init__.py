"""Fine-tuning that gives the same model however it is run (its workers are started by
:mod:`catwalk_steps.distributed.launch`): on multiple-choice tasks with the rank-classification
loss, or on generative tasks with the answer's loss: each the request kind's own
:class:`~catwalk_steps.kinds.TrainingObjective` (:mod:`.trained_kind`: the kind a step trains).

- :mod:`.settings`: ``catwalk::finetune``'s settings, each documented, and their checks;
- :mod:`.fine_tuning`: one node's part of a run, from the settings to its workers;
- :mod:`.batches`: which examples every optimizer step and micro-batch sees, for any device count;
- :mod:`.seeds`: seeds derived per purpose (data order, dropout of each micro-batch);
- :mod:`.checkpoints`: world-size independent, kill-safe checkpoints;
- :mod:`.loop`: the training loop itself; :mod:`.gradients`: clipping, and the norm the trackers
  report (:mod:`catwalk_steps.tracking.training`).
"""
