"""CUDA paths (skipped without a GPU; benchmarks/gpu_check.sh runs them on one): bf16 autocast,
torch.compile, and stacked training on the device."""

import json

import pytest
import torch

from repro.runtime.config import make_run_config
from repro.runtime.model import Transformer
from repro.runtime.shapes import model_config
from repro.runtime.train import train, train_stacked

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BASE = dict(
    model="tiny", seq_len=32, batch_size=8, micro_batch=4, epochs=1, eval_every=0.5, device="cuda"
)


def test_bf16_autocast_close_to_float32():
    torch.manual_seed(0)
    model = Transformer(model_config("cpu-s", 512)).cuda()
    tokens = torch.randint(0, 512, (4, 128), device="cuda")
    with torch.no_grad():
        exact = model(tokens)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fast = model(tokens).float()
    assert (fast - exact).abs().max().item() < 0.1
    assert not torch.equal(fast, exact)  # autocast really ran in bf16


def test_compiled_run_matches_eager(synthetic_pool, tmp_path):
    eager = train(
        make_run_config(BASE | {"pool": str(synthetic_pool)}), tmp_path / "eager", progress=False
    )
    compiled = train(
        make_run_config(BASE | {"pool": str(synthetic_pool), "compile": True}),
        tmp_path / "compiled",
        progress=False,
    )
    assert eager["status"] == compiled["status"] == "done"
    assert compiled["best_val_loss"] == pytest.approx(eager["best_val_loss"], abs=0.02)


def test_stacked_on_cuda_matches_separate_runs(synthetic_pool, tmp_path):
    configs = [
        make_run_config(BASE | {"pool": str(synthetic_pool), "lr": lr}) for lr in (1e-3, 1e-2)
    ]
    alone = [train(c, tmp_path / f"alone{i}", progress=False) for i, c in enumerate(configs)]
    stacked = train_stacked(configs, [tmp_path / f"stacked{i}" for i in range(2)], progress=False)
    for a, s in zip(alone, stacked):
        assert s["best_val_loss"] == pytest.approx(a["best_val_loss"], abs=0.02)
    assert json.loads((tmp_path / "stacked0" / "status.json").read_text())["stacked"] == 2
