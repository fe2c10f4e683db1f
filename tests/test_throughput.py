"""Training speed in the progress line: examples/s, tokens/s, and MFU where the peak is known."""

import torch

from catwalk_steps.models.scoring import Query, collate_queries
from catwalk_steps.models.shared_context import collate_shared
from catwalk_steps.training import throughput
from catwalk_steps.training.throughput import Throughput, batch_tokens, peak_flops


def test_tokens_are_the_positions_read_without_padding():
    plain = collate_queries([Query((1, 2, 3), (4, 5)), Query((6,), (7,))], pad_token_id=0, max_length=64)
    assert batch_tokens(plain) == 4 + 1  # inputs: context + all but the last continuation token
    shared = collate_shared([(1, 2, 3), (6,)], [[(4, 5), (8, 9, 10)], [(7,)]], pad_token_id=0)
    assert batch_tokens(shared) == (3 + 1) + (1 + 2 + 0)


def test_rates_count_only_the_timed_steps(monkeypatch):
    clock = iter([0.0, 2.0, 100.0, 102.0])  # two steps of 2 s, 98 s of validation between them
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: next(clock))
    batch = {"attention_mask": torch.ones(4, 50, dtype=torch.long)}
    speed = Throughput(parameters=10**9, peak=None)
    for _ in range(2):
        speed.begin()
        speed.count(4, [batch])
        speed.end()
    assert speed.rates() == {"ex/s": "2.0", "tok/s": "100"}  # no MFU without a known peak
    speed.peak = 1e12
    clock = iter([0.0, 1.0])
    speed.begin()
    speed.count(4, [batch])
    assert speed.rates()["mfu"] == f"{6 * 10**9 * 200 / 1e12:.1%}"


def test_a_peak_only_for_known_cuda_devices(monkeypatch):
    assert peak_flops(torch.device("cpu"), "bf16-mixed") is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 PCIe")
    assert peak_flops(torch.device("cuda:0"), "bf16-mixed") == 756e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    assert peak_flops(torch.device("cuda:0"), "32") == 67e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 NVL")
    assert peak_flops(torch.device("cuda:0"), "bf16-mixed") == 835e12  # not the SXM part's 989
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    assert peak_flops(torch.device("cuda:0"), "bf16-mixed") is None  # a slice: not the whole GPU's peak
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Some GPU")
    assert peak_flops(torch.device("cuda:0"), "bf16-mixed") is None
