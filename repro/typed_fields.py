"""Field values as a YAML file gives them, checked and converted to a dataclass's field types
(presets and their pools: repro.preset_files); a wrong field is a one-line error naming it."""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import fields

from repro.errors import ReproError
from repro.units import parse_count


def typed_fields(cls: type, values: dict, where: str) -> dict:
    """`values` checked against the fields of dataclass `cls` and converted to their types
    (lists to tuples); an unknown field or a wrong type is a one-line error naming it."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    converted = {}
    for key, value in values.items():
        if key not in names:
            raise ReproError(f"{where}: unknown field {key!r}; fields: {', '.join(names)}")
        converted[key] = _converted(value, hints[key], f"{where}: {key}")
    return converted


def _converted(value, hint, where: str):
    """`value` (as YAML read it) as type `hint`: int, float, str, bool, X | None, tuple[X, ...]
    (a single value for a one-element tuple), tuple[X, Y], dict[K, V] or dict."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        return _converted(value, next(a for a in args if a is not type(None)), where)
    if origin is tuple:
        if args[-1] is Ellipsis and isinstance(value, int | float | str | bool):
            value = [value]  # one value of a list field, e.g. `epochs: 8`
        if not isinstance(value, list | tuple):
            raise ReproError(f"{where}: expected a list, got {value!r}")
        items = args[:1] * len(value) if args[-1] is Ellipsis else args
        if len(items) != len(value):
            raise ReproError(f"{where}: expected {len(items)} values, got {len(value)}")
        return tuple(
            _converted(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, items))
        )
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ReproError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args or (None, None)
        return {
            (_converted(k, key_type, where) if key_type else k): (
                _converted(v, value_type, f"{where}[{k}]") if value_type else v
            )
            for k, v in value.items()
        }
    return _scalar_value(value, hint, where)


def _scalar_value(value, hint: type, where: str):
    """int, float, bool or str, strictly: no bool as a number, no non-finite floats; a count may
    be written 500k / 2.5M, a float as a string YAML leaves unparsed (1e-3)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and number:
        return value
    if hint is int and isinstance(value, str) and re.fullmatch(r"[\d.]+\s*[kKmMbB]", value):
        return parse_count(value, where)
    if hint is float and (number or isinstance(value, str)):
        try:
            converted = float(value)
        except ValueError:
            converted = math.nan
        if math.isfinite(converted):
            return converted
    if hint is str and (number or isinstance(value, str)):
        return str(value)
    raise ReproError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
