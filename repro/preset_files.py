"""Presets as YAML files: the built-in ones (repro/builtin_presets/, PRESETS) and users' preset
files, read by one loader. A file names the fields it sets; the rest come from its `base` preset
(a user's file: default smoke; a built-in file: a built-in listed before it, or none, the
dataclass defaults then); `pool_spec` sets fields of the pools' recipe
(repro.data.build.PoolSpec)."""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, replace
from pathlib import Path

import yaml

from repro.data.build import PoolSpec
from repro.dry_run import DRY_RUN, dry_run_preset
from repro.errors import ReproError
from repro.paths import project_root
from repro.presets import Preset
from repro.typed_fields import typed_fields

BUILTIN_DIR = Path(__file__).parent / "builtin_presets"
BUILTIN_NAMES = ("smoke", "cpu", "cpu-regime", "gpu-small", "gpu")
"""The built-in presets in the order `repro preset list` shows them (a file's base comes first)."""


def _read_yaml(path: Path) -> dict:
    """A preset file's mapping; a file that is not UTF-8 YAML of a mapping is a one-line error."""
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not UTF-8 text; save the preset file as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ReproError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ReproError(f"{path}: a preset file is a mapping of fields, e.g. 'base: smoke'")
    return data


def _preset(data: dict, name: str, base: Preset | None, path: Path) -> Preset:
    """The preset `name` that `data` (a preset file's fields, `base` and `name` taken out) sets
    over `base`; a local pool source is read relative to `path`'s folder."""
    pool_changes = data.pop("pool_spec", None) or {}
    if not isinstance(pool_changes, dict):
        raise ReproError(
            f"{path}: pool_spec must be a mapping of pool fields, e.g. 'source: my.txt'"
        )
    if {"seed", "val_seed"} & set(pool_changes):
        raise ReproError(f"{path}: pool seeds come from pool_seeds (e.g. pool_seeds: [0, 1])")
    pool_fields = typed_fields(PoolSpec, pool_changes, f"{path}: pool_spec")
    pool = replace(base.pool_spec, **pool_fields) if base else PoolSpec(**pool_fields)
    local = path.parent / pool.source
    if "source" in pool_changes and (local.exists() or glob.glob(str(local))):
        pool = replace(pool, source=str(local))  # a local file or glob, relative to this file
    preset_fields = typed_fields(Preset, data, str(path))
    if base is None:
        return Preset(name=name, pool_spec=pool, **preset_fields)
    return replace(base, name=name, pool_spec=pool, **preset_fields)


def _builtin_presets() -> dict[str, Preset]:
    presets: dict[str, Preset] = {}
    for name in BUILTIN_NAMES:
        path = BUILTIN_DIR / f"{name}.yaml"
        data = _read_yaml(path)
        base = data.pop("base", None)
        presets[name] = _preset(data, name, presets[base] if base else None, path)
    return presets


PRESETS: dict[str, Preset] = _builtin_presets()


def load_preset(path: str | Path) -> Preset:
    """A user's preset YAML file: `base` (a built-in preset, default smoke) with any of its
    fields overridden; `pool_spec` overrides fields of the pools' recipe (source, text_field,
    text_unit, tokens, val_tokens, vocab_size, tokenizer, ...); `name` defaults to the file's
    stem. A local source path is read relative to the file."""
    path = Path(path).resolve()
    data = _read_yaml(path)
    base_name = data.pop("base", "smoke")
    if not isinstance(base_name, str) or base_name not in PRESETS:
        raise ReproError(f"{path}: unknown base {base_name!r}; choose one of: {', '.join(PRESETS)}")
    name = data.pop("name", path.stem)
    if not isinstance(name, str):
        raise ReproError(f"{path}: name must be a string (a folder name), got {name!r}")
    if name.removesuffix(DRY_RUN) in PRESETS:  # a built-in's or its dry run's runs/ and figures/
        raise ReproError(f"{path}: name {name!r} is a built-in preset's; choose another name")
    return _preset(data, name, PRESETS[base_name], path)


def get_preset(name: str | Path | None = None, dry_run: bool = False) -> Preset:
    """A built-in preset by name, or a preset YAML file (a path ending in .yaml / .yml, relative
    to the working directory or the project root); default: $REPRO_PRESET, else cpu. With
    `dry_run`, the built-in preset shrunk to CPU size (dry_run_preset), named NAME-dry-run."""
    name = str(name or os.environ.get("REPRO_PRESET", "cpu"))
    if dry_run:
        if name not in PRESETS:
            raise ReproError(f"--dry-run takes a built-in preset ({', '.join(PRESETS)})")
        return dry_run_preset(PRESETS[name])
    if name.endswith((".yaml", ".yml")):
        candidates = [Path(name), project_root() / name]
        found = next((path for path in candidates if path.is_file()), None)
        if found is None:
            raise ReproError(
                f"preset file {name} not found (looked in the working directory and "
                f"{project_root()})"
            )
        return load_preset(found)
    if name not in PRESETS:
        raise ReproError(
            f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}, or a preset .yaml file"
        )
    return PRESETS[name]


def preset_yaml(preset: Preset) -> str:
    """A preset as YAML (every field but the pool's seeds; lists for tuples), as `repro preset
    show` prints it: a preset file that gives the same preset."""

    def plain(value):
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    values = asdict(preset)
    for seed in ("seed", "val_seed"):  # set per pool from pool_seeds
        del values["pool_spec"][seed]
    return yaml.safe_dump(plain(values), sort_keys=False, default_flow_style=None)
