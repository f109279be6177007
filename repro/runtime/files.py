"""Files written so that a reader never sees half of one: write a temporary file, flush it to disk,
then rename it over the target."""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_write(path: Path, mode: str = "w", keep_previous: Path | None = None) -> Iterator[IO]:
    """Open `path` + ".tmp" for writing; once the block succeeds, flush it to disk, move the old
    `path` to `keep_previous` (if given) and rename the temporary file to `path`. A failing block
    removes the temporary file; a killed process leaves at most the temporary file, which the next
    write replaces."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if keep_previous is not None and path.exists():
        os.replace(path, keep_previous)
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    """Write `obj` to `path` as indented JSON, atomically."""
    with atomic_write(path) as f:
        f.write(json.dumps(obj, indent=2) + "\n")
