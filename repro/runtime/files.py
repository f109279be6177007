"""Files written so that a reader never sees half of one: JSON by write-then-rename."""

import json
import os
from pathlib import Path


def write_json(path: Path, obj: dict) -> None:
    """Write `obj` to `path` as indented JSON, atomically (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)
