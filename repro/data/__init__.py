"""Data: document sources, tokenizers and pools (see pool.py for the on-disk format)."""

from repro.data.build import PoolSpec, build_pool
from repro.data.pool import Pool, Split, load_pool, verify_pool
from repro.data.sources import Document, open_source

__all__ = [
    "Document",
    "Pool",
    "PoolSpec",
    "Split",
    "build_pool",
    "load_pool",
    "open_source",
    "verify_pool",
]
