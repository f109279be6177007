"""repro: multi-epoch pretraining on a finite pool of documents (arXiv 2610.15965)."""

__version__ = "0.1.0"
