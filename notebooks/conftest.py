"""nbval runs the notebooks with the smoke preset (kernels inherit this environment)."""

import os

os.environ.setdefault("REPRO_PRESET", "smoke")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
