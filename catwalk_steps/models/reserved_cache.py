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

import torch
from transformers.cache_utils import Cache, DynamicLayer


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
        if self.buffers is None or end > self.buffers[0].shape[-2]:
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

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keeps the rows ``indices`` (sequences that go on generating), their room included."""
        if self.buffers is None:
            return
        filled = self.get_seq_length()
        self.buffers = tuple(buffer[indices] for buffer in self.buffers)
        self.keys, self.values = (buffer[..., :filled, :] for buffer in self.buffers)


def reserved_cache(capacity: int) -> Cache:
    """A cache whose every layer grows in place up to ``capacity`` positions."""
    return Cache(layer_class_to_replicate=lambda: ReservedLayer(capacity))
