"""One loader from plain values (YAML, JSON, key=value text) to typed dataclasses: the run config
(repro.runtime.config), presets and their sections, and the pools' recipe
(repro.design.preset_files). Each value is checked and converted to its field's type (a Literal's
choices are left to the class's own checks); a wrong one is a one-line error naming the field's path
(`grid.lrs[2][0]: expected float, got 'x'`).

A field may name its own parser in its metadata (`{"parse": function(value, where)}`), as the run
fields written as text do (save_steps "10,20", batch_schedule "0:4,0.5:16"). With `text`, values
may also be strings as a command line gives them ("8", "true") and whole floats stand for ints
(8.0), as config.json files of older runs hold them.
"""

from __future__ import annotations

import functools
import math
import os
import re
import types
import typing
from dataclasses import MISSING, fields, is_dataclass, replace
from typing import TypeVar

import yaml

from repro.errors import ReproError
from repro.units import parse_count

T = TypeVar("T")

BOOLEANS = {"true": True, "1": True, "yes": True, "on": True}
BOOLEANS |= {"false": False, "0": False, "no": False, "off": False}


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping that holds a key twice (PyYAML keeps the last one silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (a merge key, <<, may
    repeat what it merges)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        lines: dict = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in lines:
                raise DuplicateKeyError(
                    f"key {key!r} is given twice, on lines {lines[key]} and {line}; keep one"
                )
            lines[key] = line
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> object:
    """YAML `text` as plain values, as yaml.safe_load reads it, except that a key given twice in
    one mapping is a DuplicateKeyError (a yaml.YAMLError) naming the key and both its lines."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def load_dataclass(
    cls: type[T], values: dict, where: str = "", base: T | None = None, text: bool = False
) -> T:
    """An instance of dataclass `cls`: `values` converted to its fields' types over `base` (an
    instance whose other fields are kept; None: the class's defaults). A field that is itself a
    dataclass takes a mapping, merged over `base`'s value of it the same way. An unknown field or
    a wrong type is a one-line ReproError naming its path under `where`."""
    at = f"{where}: " if where else ""
    if not isinstance(values, dict):
        raise ReproError(f"{at}expected a mapping of fields, got {values!r}")
    hints, by_name = _hints(cls), {f.name: f for f in fields(cls)}
    converted = {}
    for key, value in values.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in by_name:
            known = ", ".join(by_name)
            raise ReproError(f"{at}unknown field {key!r}; fields: {known}")
        hint, parse = hints[key], by_name[key].metadata.get("parse")
        if parse is not None:
            converted[key] = parse(value, path)
        elif is_dataclass(hint):
            converted[key] = load_dataclass(hint, value, path, getattr(base, key, None), text)
        else:
            converted[key] = _converted(value, hint, path, text)
    if base is not None:
        return replace(base, **converted)
    missing = [f.name for f in fields(cls) if f.name not in converted and _required(f)]
    if missing:
        raise ReproError(f"{at}{missing[0]} is missing; give it")
    return cls(**converted)


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _required(f) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _converted(value, hint, where: str, text: bool):
    """`value` as type `hint`: int, float, str, bool, a Literal (a string: its choices are checked
    where the class checks its fields, e.g. runtime.config.check_fields), X | None,
    tuple[X, ...] (a single value for a one-element tuple), tuple[X, Y], dict[K, V] or dict."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) > 1:  # a union of scalars, e.g. a run field's value: as it is
            if isinstance(value, bool | int | float | str):
                return value
            raise ReproError(f"{where}: expected one value, got {value!r}")
        return _converted(value, kinds[0], where, text)
    if origin is typing.Literal:
        return _scalar(value, str, where, text)
    if origin is tuple:
        return _tuple(value, args, where, text)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ReproError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args or (None, None)
        return {
            (_converted(k, key_type, where, text) if key_type else k): (
                _converted(v, value_type, f"{where}[{k}]", text) if value_type else v
            )
            for k, v in value.items()
        }
    return _scalar(value, hint, where, text)


def _tuple(value, args: tuple, where: str, text: bool) -> tuple:
    if args[-1] is Ellipsis and isinstance(value, int | float | str | bool):
        value = [value]  # one value of a list field, e.g. `epochs: 8`
    if not isinstance(value, list | tuple):
        raise ReproError(f"{where}: expected a list, got {value!r}")
    items = args[:1] * len(value) if args[-1] is Ellipsis else args
    if len(items) != len(value):
        raise ReproError(f"{where}: expected {len(items)} values, got {len(value)}")
    return tuple(
        _converted(v, t, f"{where}[{i}]", text) for i, (v, t) in enumerate(zip(value, items))
    )


def _scalar(value, hint: type, where: str, text: bool):
    """int, float, bool or str, strictly: no bool as a number, no non-finite floats; a count may
    be written 500k / 2.5M, a float as a string YAML leaves unparsed (1e-3); with `text`, any
    scalar as a string, and an int as a whole float."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is bool and text and isinstance(value, str) and value.lower() in BOOLEANS:
        return BOOLEANS[value.lower()]
    if hint is int and number and (isinstance(value, int) or (text and value.is_integer())):
        return int(value)
    if hint is int and isinstance(value, str) and re.fullmatch(r"[\d.]+\s*[kKmMbB]", value):
        return parse_count(value, where)
    if hint is int and text and isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value):
        return int(value)
    if hint is float and (number or isinstance(value, str)):
        try:
            converted = float(value)
        except ValueError:
            converted = None
        if converted is not None and math.isfinite(converted):
            return converted
        if converted is not None:
            raise ReproError(f"{where}: expected a finite float, got {value!r}")
    if hint is str and (number or isinstance(value, str | os.PathLike)):
        return str(value)
    raise ReproError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
