"""Shared fixtures (the offline environment is set by the conftest.py at the project root)."""

import pytest

from repro.data.build import PoolSpec, build_pool

SMALL_SYNTHETIC = PoolSpec(source="synthetic", tokens=30_000, val_tokens=5_000, vocab_size=300)


@pytest.fixture(scope="session")
def small_synthetic_spec():
    return SMALL_SYNTHETIC


@pytest.fixture(scope="session")
def synthetic_pool(tmp_path_factory):
    """A 30k-token synthetic pool (vocab 300), built once per test session."""
    return build_pool(
        SMALL_SYNTHETIC, tmp_path_factory.mktemp("pools") / "synthetic", progress=False
    )


@pytest.fixture(scope="session")
def stdlib_pool(tmp_path_factory):
    """A 60k-token stdlib pool (vocab 300), built once per test session."""
    spec = PoolSpec(source="stdlib", tokens=60_000, val_tokens=10_000, vocab_size=300)
    return build_pool(spec, tmp_path_factory.mktemp("pools") / "stdlib", progress=False)
