"""Environment for every test and for the notebooks that nbval runs (their kernels inherit it):
offline, the smoke preset, read from its shipped results (results/smoke.tar.xz), OpenMP threads
that sleep rather than spin while waiting."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("REPRO_PRESET", "smoke")
os.environ.setdefault("REPRO_TRAIN", "0")
# pytest-xdist's workers share the cores: OpenMP threads that spin while they wait for work
# (the default) would then slow a 2-thread run 5x (tests/test_stacked.py's thread-count test: 57 s
# beside one busy core, 11 s passive); the policy does not change a result's bits
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_collection_modifyitems(items) -> None:
    """nbval's notebook cells are slow tests: each notebook runs end to end (pytest -m slow)."""
    import pytest

    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
