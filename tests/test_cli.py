"""Command-line conventions: every argument has help, defaults are shown, and `repro train --help`
lists every run field with its default and meaning."""

import argparse
import errno
import os
from dataclasses import fields

import pytest

from repro.cli import build_parser, main
from repro.runtime.config import RunConfig, config_record


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("repro",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


@pytest.mark.parametrize("path, parser", list(_parsers(build_parser())), ids=lambda v: str(v))
def test_every_argument_has_help_and_shows_its_default(path, parser):
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.dest == "help":
            continue
        assert action.help, f"{' '.join(path)} {action.dest} has no help"
        if action.default not in (None, False) and "(default" not in action.help:
            assert f"(default: {action.default})" in " ".join(text.split())


def test_train_help_lists_every_run_field(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    defaults = config_record(RunConfig())  # tuple fields as text, the form key=value takes
    for field in fields(RunConfig):
        assert f"{field.name}={defaults[field.name]!r}" in text and field.metadata["doc"] in text


@pytest.mark.parametrize(
    ("code", "says"),
    [(errno.EACCES, "permission denied; give this user access"), (errno.ENOSPC, "no space")],
)
def test_an_os_error_of_permission_or_space_is_one_line(code, says, monkeypatch, capsys):
    """Unreadable folders (chmod 000; not testable as root, who reads them anyway) and a full
    disk, wherever no caller named them first: rc 2 and one line naming the file."""

    def fail(args):
        raise OSError(code, os.strerror(code), "/data/pool/meta.json")

    monkeypatch.setattr("repro.cli._data_info", fail)
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "info", "/data/pool"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"repro: error: /data/pool/meta.json: {says}")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["data", "build", "--source", "synthetic", "--tokens", "4k", "--out", "p"], "no pool"),
        (["sweep", "run", "grid.yaml", "--out", "s"], "finished runs are kept"),
    ],
)
def test_ctrl_c_says_what_the_command_kept(argv, says, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    command = "_data_build" if argv[0] == "data" else "_sweep_run"
    monkeypatch.setattr(f"repro.cli.{command}", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 130 and err.count("\n") == 1
    assert err.startswith(f"repro: stopped; {says}") and err.rstrip().endswith(argv[-1])


def test_preset_list_names_every_built_in_preset(capsys):
    """`repro preset list` comes from the registry: one line per preset, in its order."""
    from repro.design.preset_files import PRESETS

    main(["preset", "list"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)
    assert all(f"{len(p.pools.seeds)} pools" in line for line, p in zip(lines, PRESETS.values()))


@pytest.mark.parametrize("workers", ["-3", "0", "abc", "2.5"])
def test_reproduce_refuses_workers_under_one(workers, monkeypatch, capsys):
    monkeypatch.setattr("repro.reproduce.reproduce", lambda *args: pytest.fail("it ran"))
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--preset", "smoke", "--workers", workers])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert f"error: argument --workers: takes a whole number, 1 or more; got {workers!r}" in err
