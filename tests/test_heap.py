"""Trimming the heap during training: freed pages go back to the operating system, and the trims
come where the training loop's peak builds up (each sharded module's backward pass, each optimizer
step), without changing a number."""

import copy
import ctypes

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from catwalk_steps.distributed import heap

glibc_only = pytest.mark.skipif(heap._TRIM is None, reason="malloc_trim is glibc's")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * ctypes.CDLL(None).getpagesize()


@glibc_only
def test_freed_small_blocks_below_a_live_one_are_given_back():
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 64 << 10, 3200  # 200 MiB in blocks below the mmap threshold: on the heap
    blocks = [libc.malloc(size) for _ in range(count)]
    for block in blocks:
        ctypes.memset(block, 1, size)  # resident
    pin = libc.malloc(size)  # above them: the heap's top cannot shrink past it
    for block in blocks:
        libc.free(block)
    held = resident_bytes()
    heap.release_freed_heap()
    given_back = held - resident_bytes()
    libc.free(pin)
    assert given_back > 0.8 * size * count


@pytest.fixture
def one_worker_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@glibc_only
def test_trims_as_each_sharded_module_starts_its_backward_and_after_each_optimizer_step(one_worker_group, monkeypatch):
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    model = copy.deepcopy(plain)
    for block in model[:3:2]:
        fully_shard(block)
    fully_shard(model)  # 3 sharded modules: 2 blocks and the root
    optimizer = torch.optim.Adam(model.parameters())
    trims = []
    monkeypatch.setattr(heap, "_TRIM", lambda pad: trims.append(pad))
    heap.release_freed_heap_while_training(model, optimizer)

    with torch.no_grad():
        model(torch.ones(2, 8))  # no backward pass: no trim
    assert trims == []
    inputs = torch.randn(4, 8)
    model(inputs).sum().backward()
    assert len(trims) == 3
    plain(inputs).sum().backward()
    for ours, theirs in zip(model.parameters(), plain.parameters()):
        assert torch.equal(ours.grad.full_tensor(), theirs.grad)
    optimizer.step()
    assert len(trims) == 4
