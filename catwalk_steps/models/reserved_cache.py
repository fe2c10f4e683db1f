"""A key/value cache written in place, for greedy generation.

transformers' ``DynamicCache`` concatenates each step's keys and values onto the cache, which
copies the whole cache at every decode step: with 32 prompts of ~460 tokens and 256 new tokens,
not copying saved a quarter of the generation's time on CPU (``benchmarks/generation.py --long``).
Generation knows how long its cache can grow (the longest prompt plus the largest token budget
of its batch, what ``max_batch_tokens`` counts), so this cache writes each step's keys and values
in place into buffers with room to spare: twice the positions filled, up to that bound. So it
copies the cache a few times per batch instead of at every step, and holds at most twice what it
has filled (a batch whose answers end early does not hold its whole budget). Attention reads a
view of the filled positions: the same values as the concatenated tensors, so the same logits.
"""

from functools import partial

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class ReservedLayer(DynamicLayer):
    """One layer's keys and values in buffers of up to ``capacity`` positions; ``keys`` and
    ``values`` are views of the positions filled so far (what a ``DynamicLayer`` holds). A buffer
    that is full is reallocated at twice the positions filled, at most ``capacity`` (beyond it, a
    wrong capacity, still twice: it costs time, not results)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.buffers = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if not self._views_of_buffers() or end > self.buffers[0].shape[-2]:
            room = min(2 * end, self.capacity) if end <= self.capacity else 2 * end
            self._reserve(key_states, value_states, room, start)
        keys, values = self.buffers
        keys[..., start:end, :] = key_states
        values[..., start:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, room: int, filled: int) -> None:
        """New buffers of ``room`` positions holding the ``filled`` positions so far."""
        buffers = tuple(
            states.new_empty((*states.shape[:-2], room, states.shape[-1])) for states in (key_states, value_states)
        )
        if filled:
            buffers[0][..., :filled, :] = self.keys
            buffers[1][..., :filled, :] = self.values
        self.buffers = buffers
        self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True

    def _views_of_buffers(self) -> bool:
        """Whether ``keys`` and ``values`` are still views of the buffers: the methods inherited
        from ``DynamicLayer`` that move or reorder them (beam search's ``reorder_cache``,
        ``batch_repeat_interleave``, offloading) replace them with new tensors, and the next
        update then copies those into new buffers."""
        return self.buffers is not None and all(
            view.data_ptr() == buffer.data_ptr() and view.shape[:-2] == buffer.shape[:-2]
            for view, buffer in zip((self.keys, self.values), self.buffers)
        )

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keeps the rows ``indices`` (sequences that go on generating), their room included."""
        if not self._views_of_buffers():
            return super().batch_select_indices(indices)
        filled = self.get_seq_length()
        self.buffers = tuple(buffer[indices] for buffer in self.buffers)
        self.keys, self.values = (buffer[..., :filled, :] for buffer in self.buffers)


class ReservedCache(DynamicCache):
    """A ``DynamicCache`` (what an ``EncoderDecoderCache`` needs to drop rows) whose every layer
    grows in place up to ``capacity`` positions."""

    def __init__(self, capacity: int):
        super().__init__()  # no layers yet: one is added per layer at its first update
        self.layer_class_to_replicate = partial(ReservedLayer, capacity)
