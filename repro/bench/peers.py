"""Benchmarks against peers (not tests): repro's training step against Hugging Face transformers'
LlamaForCausalLM trained with torch AdamW on identical shapes, and a sweep of K configurations as K
separate `repro train` processes against one stack of the K (repro.runtime.stacked).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from repro.bench.measure import throughput
from repro.errors import ReproError
from repro.runtime.config import make_run_config
from repro.runtime.model import Transformer
from repro.runtime.optim import GRAD_CLIP
from repro.runtime.run_dir import RunDir
from repro.runtime.shapes import ModelConfig, model_config


def hf_llama(config: ModelConfig, device: str, attention: str = "sdpa") -> torch.nn.Module:
    """transformers.LlamaForCausalLM of the same shape as repro's Transformer(config): float32
    weights, `attention` ("sdpa" or "eager"), no KV cache (training), in training mode."""
    try:
        import transformers
    except ImportError:
        raise ReproError(
            "repro bench peers needs transformers; pip install -e '.[bench]'"
        ) from None
    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        max_position_embeddings=config.max_seq_len,
        rope_theta=config.rope_theta,
        rms_norm_eps=config.norm_eps,
        tie_word_embeddings=config.tie_embeddings,
        attention_bias=False,
        mlp_bias=False,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM._from_config(
        hf_config, attn_implementation=attention, dtype=torch.float32
    )
    return model.to(device).train()


HF_NAMES = {
    "tok_embeddings": "model.embed_tokens",
    "norm": "model.norm",
    "output": "lm_head",
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w2": "mlp.down_proj",
    "feed_forward.w3": "mlp.up_proj",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
"""repro's module names -> LlamaForCausalLM's (layers.i.<name> -> model.layers.i.<name>)."""


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """`model`'s weights under LlamaForCausalLM's names (load with strict=True)."""
    out = {}
    for key, value in model.state_dict().items():
        module = key.removesuffix(".weight")
        if module.startswith("layers."):
            _, i, rest = module.split(".", 2)
            out[f"model.layers.{i}.{HF_NAMES[rest]}.weight"] = value
        else:
            out[f"{HF_NAMES[module]}.weight"] = value
    return out


def _hf_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats/token) of `batch` [B, T+1]: inputs batch[:, :-1], targets
    batch[:, 1:], exactly the T tokens repro's step scores. (HF's labels=input_ids on the T inputs
    would score only T - 1 of them: it shifts the labels inside.)"""
    logits = model(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def _hf_tokens_per_s(
    model: torch.nn.Module, micro_batch: int, seq_len: int, device: str, steps: int, warmup: int
) -> float:
    """Training tokens/s of the HF model: forward and backward (bf16 autocast on CUDA), clipping to
    GRAD_CLIP and torch's fused AdamW (as repro's optimizer, and HF Trainer's default), one
    micro-batch per step."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True
    )
    vocab_size = model.config.vocab_size
    batch = torch.randint(0, vocab_size, (micro_batch, seq_len + 1), device=device)
    cuda = device.startswith("cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            t0 = time.perf_counter()
        with autocast:
            loss = _hf_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()
    return steps * micro_batch * seq_len / (time.perf_counter() - t0)


def _one_round(
    size: str, vocab_size: int, seq_len: int, micro_batch: int, device: str, steps: int, warmup: int
) -> tuple[int, float, float]:
    """Parameters, repro's and HF's training tokens/s, each on a fresh model; raises if the two
    models' parameter counts differ."""
    ours = throughput(
        size, vocab_size, seq_len, micro_batch, steps=steps, warmup=warmup, device=device
    )
    hf = hf_llama(model_config(size, vocab_size), device)
    hf_params = sum(p.numel() for p in hf.parameters())
    if hf_params != ours["params"]:
        raise RuntimeError(
            f"{size}: LlamaForCausalLM has {hf_params} parameters, repro's model "
            f"{ours['params']}; the shapes differ, so the ratio would not be fair"
        )
    return (
        hf_params,
        ours["tokens_per_s"],
        _hf_tokens_per_s(hf, micro_batch, seq_len, device, steps, warmup),
    )


def peer_step_times(
    sizes: list[str],
    micro_batches: list[int],
    seq_len: int,
    vocab_size: int,
    device: str,
    steps: int,
    warmup: int,
    rounds: int,
) -> list[dict]:
    """Training tokens/s of repro's own step (repro.bench.measure.throughput) against transformers'
    LlamaForCausalLM of identical shape with torch's fused AdamW, per model size and micro-batch
    (sequences of seq_len tokens, one micro-batch per step). Same device, thread count and dtype
    (float32 on CPU, bf16 autocast on CUDA); the two alternate `rounds` times, each on fresh models,
    and the medians are kept. ratio = repro / hf tokens/s. Raises if the parameter counts differ."""
    rows = []
    for size in sizes:
        for micro_batch in micro_batches:
            measured = [
                _one_round(size, vocab_size, seq_len, micro_batch, device, steps, warmup)
                for _ in range(rounds)
            ]
            repro_tps = float(np.median([m[1] for m in measured]))
            hf_tps = float(np.median([m[2] for m in measured]))
            rows.append(
                {
                    "size": size,
                    "params": measured[0][0],
                    "micro_batch": micro_batch,
                    "seq_len": seq_len,
                    "device": device,
                    "threads": torch.get_num_threads(),
                    "repro_tokens_per_s": repro_tps,
                    "hf_tokens_per_s": hf_tps,
                    "ratio": repro_tps / hf_tps,
                }
            )
    return rows


def _timed_processes(pool: str, fields: dict, lrs: list[float], root: Path) -> float:
    """Wall seconds of one `repro train` process per lr, one after another, into root/process-k."""
    t0 = time.perf_counter()
    for k, lr in enumerate(lrs):
        overrides = [f"{key}={value}" for key, value in (fields | {"lr": repr(lr)}).items()]
        command = [sys.executable, "-m", "repro.cli", "train", "--pool", pool, "--quiet"]
        command += ["--out", str(root / f"process-{k}"), *overrides]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0


def _difference(a: float | None, b: float | None) -> float:
    """|a - b|; a run that diverged (None) matches only another that diverged."""
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    return abs(a - b)


def _startup_s() -> float:
    """Wall seconds of a Python process that only imports the trainer (Python and torch)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import repro.runtime.train"], check=True)
    return time.perf_counter() - t0


def sweep_processes_vs_stack(
    pool: str, size: str, configs: int, batch_size: int, seq_len: int, epochs: int, threads: int
) -> dict:
    """Wall seconds of K = `configs` training runs differing only in lr (1e-3 * 1.5**k) run as K
    separate `repro train` processes one after another, against the K trained as one stack
    (repro.runtime.train.train_stacked) in this process; each run in its own temporary directory,
    `threads` CPU threads throughout. The processes' time includes each one's start-up (Python and
    the torch import, about 1.5 s; startup_s measures one): that is part of what separate processes
    cost. ratio = processes_s / stack_s; max_abs_loss_diff compares each config's best_val_loss
    (nats/token) between the two ways (0.0 on CPU: a stacked run is bit-identical to a lone one)."""
    from repro.runtime.train import train_stacked

    fields = {
        "model": size,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "epochs": epochs,
        "threads": threads,
    }
    lrs = [1e-3 * 1.5**k for k in range(configs)]
    previous_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        processes_s = _timed_processes(pool, fields, lrs, Path(tmp))
        alone = [
            RunDir(Path(tmp) / f"process-{k}").status()["best_val_loss"] for k in range(configs)
        ]
        run_configs = [make_run_config(fields | {"pool": pool, "lr": lr}) for lr in lrs]
        torch.set_num_threads(threads or previous_threads)
        try:
            t0 = time.perf_counter()
            statuses = train_stacked(
                run_configs, [Path(tmp) / f"stack-{k}" for k in range(configs)], progress=False
            )
            stack_s = time.perf_counter() - t0
        finally:
            torch.set_num_threads(previous_threads)
    stacked = [s["best_val_loss"] for s in statuses]
    return fields | {
        "pool": pool,
        "configs": configs,
        "lrs": lrs,
        "processes_s": processes_s,
        "stack_s": stack_s,
        "ratio": processes_s / stack_s,
        "startup_s": _startup_s(),
        "best_val_loss_processes": alone,
        "best_val_loss_stack": stacked,
        "max_abs_loss_diff": max(_difference(a, b) for a, b in zip(alone, stacked)),
    }
