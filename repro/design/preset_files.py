"""Presets as YAML files: the built-in ones (repro/design/builtin_presets/, PRESETS) and users'
preset files, read by one loader (repro.typed_fields). A file names the fields it sets, section by
section (`grid: {batch_sizes: [2, 8]}`); the rest come from its `base` preset (a user's file:
default smoke; a built-in file: a built-in listed before it, or none, the dataclass defaults
then); `pools.recipe` sets fields of the pools' recipe (repro.data.build.PoolSpec)."""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, replace
from pathlib import Path

import yaml

from repro.design.dry_run import DRY_RUN, dry_run_preset
from repro.design.presets import Preset
from repro.errors import ReproError
from repro.paths import project_root
from repro.typed_fields import load_dataclass, load_yaml

BUILTIN_DIR = Path(__file__).parent / "builtin_presets"
BUILTIN_NAMES = ("smoke", "cpu", "cpu-regime", "gpu-small", "gpu")
"""The built-in presets in the order `repro preset list` shows them (a file's base comes first)."""


def _read_yaml(path: Path) -> dict:
    """A preset file's mapping; a file that is not UTF-8 YAML of a mapping (each key once) is a
    one-line error."""
    try:
        data = load_yaml(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ReproError(f"{path}: not UTF-8 text; save the preset file as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ReproError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ReproError(f"{path}: a preset file is a mapping of fields, e.g. 'base: smoke'")
    return data


def _preset(data: dict, name: str, base: Preset | None, path: Path) -> Preset:
    """The preset `name` that `data` (a preset file's sections, `base` and `name` taken out) sets
    over `base` (repro.typed_fields); a local pool source is read relative to `path`'s folder."""
    pools = data.get("pools")
    recipe = pools.get("recipe") if isinstance(pools, dict) else None
    if isinstance(recipe, dict) and {"seed", "val_seed"} & set(recipe):
        raise ReproError(f"{path}: pool seeds come from pools.seeds (e.g. seeds: [0, 1])")
    try:
        preset = load_dataclass(Preset, data | {"name": name}, "", base)
    except ReproError as exc:
        raise ReproError(f"{path}: {exc}") from None
    local = path.parent / preset.pools.recipe.source
    if (
        isinstance(recipe, dict)
        and "source" in recipe
        and (local.exists() or glob.glob(str(local)))
    ):
        pools = replace(preset.pools, recipe=replace(preset.pools.recipe, source=str(local)))
        preset = replace(preset, pools=pools)  # a local file or glob, relative to this file
    return preset


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
    """A user's preset YAML file: `base` (a built-in preset, default smoke) with any field of any
    section overridden; `pools: {recipe: ...}` overrides fields of the pools' recipe (source,
    text_field, text_unit, tokens, val_tokens, vocab_size, tokenizer, ...); `name` defaults to
    the file's stem. A local source path is read relative to the file."""
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
    """A preset as YAML (every field but the pool recipe's seeds; lists for tuples, batch schedules
    as text), as `repro preset show` prints it: a preset file that gives the same preset."""

    def plain(value):
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    values = asdict(preset)
    for seed in ("seed", "val_seed"):  # set per pool from pools.seeds
        del values["pools"]["recipe"][seed]
    values["schedules"]["ramps"] = preset.schedules.texts()
    return yaml.safe_dump(plain(values), sort_keys=False, default_flow_style=None)
