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


LONGEST_FIRST = (
    "test_reproduce.py",
    "test_dry_run.py",
    "test_shipped.py",
    "test_calibration.py",
    "test_stacked.py",
)
"""The test modules that take longest (CI's --durations: 250, 190, 150, 130 and 115 s of the
suite's 1,350 on 2 cores), collected first. With pytest-xdist's --no-loadscope-reorder each
worker starts them before the short modules; by default it orders modules by their number of
tests, so these few-test modules ran last, one worker alone for minutes at the end."""


def pytest_collection_modifyitems(items) -> None:
    """nbval's notebook cells are slow tests: each notebook runs end to end (pytest -m slow).
    The LONGEST_FIRST modules go first, in that order (a stable sort: each module's own order
    kept)."""
    import pytest

    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
