"""Shared fixtures. Every test runs offline: the hub is never contacted."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from repro.data.pool import PoolSpec, build_pool  # noqa: E402

SMALL_SYNTHETIC = PoolSpec(source="synthetic", tokens=30_000, val_tokens=5_000, vocab_size=300)


@pytest.fixture(scope="session")
def synthetic_pool(tmp_path_factory):
    """A 30k-token synthetic pool (vocab 300), built once per test session."""
    return build_pool(SMALL_SYNTHETIC, tmp_path_factory.mktemp("pools") / "synthetic", progress=False)


@pytest.fixture(scope="session")
def stdlib_pool(tmp_path_factory):
    """A 60k-token stdlib pool (vocab 300), built once per test session."""
    spec = PoolSpec(source="stdlib", tokens=60_000, val_tokens=10_000, vocab_size=300)
    return build_pool(spec, tmp_path_factory.mktemp("pools") / "stdlib", progress=False)
