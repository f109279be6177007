"""Environment for every test and for the notebooks that nbval runs (their kernels inherit it):
offline, the smoke preset, read from its shipped results (results/smoke.tar.xz)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("REPRO_PRESET", "smoke")
os.environ.setdefault("REPRO_TRAIN", "0")


def pytest_collection_modifyitems(items) -> None:
    """nbval's notebook cells are slow tests: each notebook runs end to end (pytest -m slow)."""
    import pytest

    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
