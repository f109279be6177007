"""The one loader from plain values to typed dataclasses (repro.typed_fields), on hand-made classes:
nested sections merge over a base, strict (YAML) and text (command line, config.json) values, a
field's own parser, and one-line errors that name the field's path."""

from dataclasses import dataclass, field

import pytest

from repro.errors import ReproError
from repro.typed_fields import DuplicateKeyError, load_dataclass, load_yaml


@dataclass(frozen=True)
class Inner:
    steps: int
    rate: float = 0.5
    tags: tuple[str, ...] = ()


def _words(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise ReproError(f"{where}: expected words, got {value!r}")
    return tuple(value.split())


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    flag: bool = False
    table: dict[int, tuple[float, ...]] = field(default_factory=dict)
    words: tuple[str, ...] = field(default=(), metadata={"parse": _words})


def test_a_nested_mapping_merges_over_the_base_section():
    base = load_dataclass(Outer, {"name": "a", "inner": {"steps": 3, "tags": ["x", "y"]}})
    assert base == Outer("a", Inner(3, 0.5, ("x", "y")))
    changed = load_dataclass(Outer, {"inner": {"rate": "1e-3"}, "words": "p q"}, "", base)
    assert changed == Outer("a", Inner(3, 0.001, ("x", "y")), words=("p", "q"))
    assert load_dataclass(Outer, {"table": {2: [1, 2.5]}}, "", base).table == {2: (1.0, 2.5)}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"name": "a"}, "inner is missing; give it"),
        ({"name": "a", "inner": 3}, "inner: expected a mapping of fields, got 3"),
        ({"name": "a", "inner": {"stepz": 1}}, "inner: unknown field 'stepz'; fields: steps, rate"),
        ({"name": "a", "inner": {"steps": "8"}}, "inner.steps: expected int, got '8'"),
        ({"name": "a", "inner": {"steps": True}}, "inner.steps: expected int, got True"),
        ({"name": "a", "inner": {"steps": 2.0}}, "inner.steps: expected int, got 2.0"),
        ({"name": "a", "inner": {"steps": 1, "rate": "nan"}}, "inner.rate: expected a finite"),
        ({"name": "a", "inner": {"steps": 1}, "flag": "yes"}, "flag: expected bool, got 'yes'"),
        ({"name": "a", "inner": {"steps": 1}, "table": {2: ["x"]}}, "table[2][0]: expected float"),
        ({"name": "a", "inner": {"steps": 1}, "words": 3}, "words: expected words, got 3"),
    ],
)
def test_strict_values_are_checked_and_errors_name_the_field(values, message):
    with pytest.raises(ReproError) as error:
        load_dataclass(Outer, values)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_text_values_convert_as_a_command_line_gives_them():
    """With `text`: "8" and "true" convert, a whole float stands for an int; "8.5" does not."""
    loaded = load_dataclass(
        Outer, {"name": "a", "inner": {"steps": "8", "rate": "2"}, "flag": "true"}, text=True
    )
    assert loaded == Outer("a", Inner(8, 2.0), flag=True)
    assert load_dataclass(Inner, {"steps": 4.0}, text=True).steps == 4
    with pytest.raises(ReproError, match="steps: expected int, got '8.5'"):
        load_dataclass(Inner, {"steps": "8.5"}, text=True)
    with pytest.raises(ReproError, match="flag: expected bool, got 'maybe'"):
        load_dataclass(Outer, {"name": "a", "inner": {"steps": 1}, "flag": "maybe"}, text=True)


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("base: smoke\ngrid: {epochs: [1]}\nbase: cpu\n", "base", (1, 3)),
        ("grid:\n  epochs: [1]\n  epochs: [2]\n", "epochs", (2, 3)),
        ("- {a: 1, a: 2}\n", "a", (1, 1)),
    ],
)
def test_a_yaml_key_given_twice_is_an_error_naming_it_and_its_lines(text, key, lines):
    with pytest.raises(DuplicateKeyError) as info:
        load_yaml(text)
    assert (
        str(info.value)
        == f"key {key!r} is given twice, on lines {lines[0]} and {lines[1]}; keep one"
    )


def test_yaml_merge_keys_and_keys_of_other_types_are_not_duplicates():
    merged = load_yaml("a: &x {b: 1}\nc:\n  <<: *x\n  b: 2\n1: one\n'1': text\n")
    assert merged == {"a": {"b": 1}, "c": {"b": 2}, 1: "one", "1": "text"}
