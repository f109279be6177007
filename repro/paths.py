"""Where the project lives: the checkout's root, under which data/pools/, runs/ and figures/ are
kept."""

from pathlib import Path


def project_root(start: str | Path | None = None) -> Path:
    """The repository root (the folder with pyproject.toml) above `start` (default: the cwd)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "repro").is_dir():
            return folder
    return here
