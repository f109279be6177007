"""repro bench peers: the HF peer has repro's exact shape and loss, and both benchmarks run."""

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from repro.bench import peers as bench_peers
from repro.runtime.model import Transformer
from repro.runtime.shapes import model_config

pytestmark = pytest.mark.slow  # real multi-process runs or lm-eval: CI runs it, `pytest` skips it

VOCAB = 300


def test_peer_step_times_tiny():
    rows = bench_peers.peer_step_times(
        ["tiny"], [1], seq_len=32, vocab_size=VOCAB, device="cpu", steps=1, warmup=1, rounds=1
    )
    assert len(rows) == 1
    row = rows[0]
    assert (row["size"], row["micro_batch"], row["seq_len"], row["device"]) == (
        "tiny",
        1,
        32,
        "cpu",
    )
    assert row["params"] == Transformer(model_config("tiny", VOCAB)).num_params()
    hf = bench_peers.hf_llama(model_config("tiny", VOCAB), "cpu")
    assert row["params"] == sum(p.numel() for p in hf.parameters())
    assert row["repro_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0
    assert row["ratio"] == pytest.approx(row["repro_tokens_per_s"] / row["hf_tokens_per_s"])
    assert row["threads"] == torch.get_num_threads()


def test_peer_step_times_refuses_different_shapes(monkeypatch):
    build = bench_peers.hf_llama
    monkeypatch.setattr(
        bench_peers, "hf_llama", lambda config, device: build(replace(config, d_ff=64), device)
    )
    with pytest.raises(RuntimeError, match="parameters"):
        bench_peers.peer_step_times(
            ["tiny"], [1], seq_len=16, vocab_size=VOCAB, device="cpu", steps=1, warmup=0, rounds=1
        )


def test_hf_peer_with_repro_weights_has_repro_loss():
    """The same weights give the same loss: the peer's shapes (and rotary, norms, attention) are
    repro's, so the step-time ratio compares the same computation."""
    config = model_config("tiny", VOCAB)
    torch.manual_seed(0)
    ours = Transformer(config)
    with torch.no_grad():
        for p in ours.parameters():
            if p.ndim == 1:  # non-unit norms, so that a swapped norm would show
                p.uniform_(0.5, 1.5)
            else:  # attention far from uniform, so that the rotary embedding counts
                p.normal_(0.0, 0.3)
    hf = bench_peers.hf_llama(config, "cpu")
    hf.load_state_dict(bench_peers.hf_state_dict(ours), strict=True)
    batch = torch.randint(0, VOCAB, (3, 65), generator=torch.Generator().manual_seed(1))
    logits = ours(batch[:, :-1])
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
    assert bench_peers._hf_loss(hf, batch).item() == pytest.approx(expected.item(), abs=1e-5)
    # HF's own convention: labels=input_ids shifts inside, so T + 1 inputs score the same T targets
    hf_own = hf(input_ids=batch, labels=batch).loss
    assert hf_own.item() == pytest.approx(expected.item(), abs=1e-5)
    # and a different model really gives a different loss
    other = bench_peers.hf_llama(config, "cpu")
    assert abs(bench_peers._hf_loss(other, batch).item() - expected.item()) > 1e-3


def test_sweep_processes_vs_stack(synthetic_pool):
    threads = torch.get_num_threads()
    result = bench_peers.sweep_processes_vs_stack(
        str(synthetic_pool), "tiny", configs=2, batch_size=16, seq_len=64, epochs=1, threads=1
    )
    assert result["processes_s"] > 0 and result["stack_s"] > 0
    assert result["ratio"] == pytest.approx(result["processes_s"] / result["stack_s"])
    assert result["startup_s"] > 0
    assert result["lrs"] == [1e-3, 1.5e-3]
    losses = result["best_val_loss_processes"]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[0] != losses[1]  # the configs differ
    assert result["best_val_loss_stack"] == losses
    assert result["max_abs_loss_diff"] == 0.0
    assert torch.get_num_threads() == threads  # the caller's thread count is restored
