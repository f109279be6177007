"""Results bundles (repro.store.bundle, repro results export|import): a store's finished runs travel
without checkpoints, read back to the same results, and never replace what a store holds; a study
without training reads them (Study.train)."""

import io
import json
import shutil
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from repro.analysis.results import load_results
from repro.cli import main
from repro.design.preset_files import PRESETS, get_preset
from repro.design.presets import changed
from repro.errors import ReproError
from repro.runtime.config import NUMERICS
from repro.runtime.run_dir import RunDir
from repro.store import bundle as bundle_module
from repro.store.bundle import (
    FORMAT,
    bundle_manifest,
    documents_read,
    export_bundle,
    import_bundle,
    volumes,
)
from repro.store.grid import plan_grid
from repro.store.sweep import run_sweep
from repro.study import Study

ROOT = Path(__file__).resolve().parents[1]
GRID = {
    "fixed": {"model": "tiny", "seq_len": 32, "batch_size": 8, "epochs": 1, "eval_every": 0.5},
    "axes": {"lr": [1e-3, 3e-3]},
}


def _grid(pool) -> dict:
    return GRID | {"fixed": GRID["fixed"] | {"pool": str(pool)}}


@pytest.fixture(scope="module")
def store(synthetic_pool, tmp_path_factory):
    """A finished sweep of two runs, and a run that never started (pending: not exported)."""
    store = tmp_path_factory.mktemp("bundle") / "store"
    run_sweep(_grid(synthetic_pool), store, workers=1, progress=False)
    (store / "0123456789ab").mkdir()
    return store


@pytest.fixture(scope="module")
def bundle(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "runs.tar.xz"
    assert export_bundle(store, out) == 2
    return out


def _files(store) -> dict[str, bytes]:
    return {
        p.relative_to(store).as_posix(): p.read_bytes()
        for p in sorted(store.rglob("*"))
        if p.is_file() and not p.name.endswith((".pt", ".lock")) and p.parent != store
    }


def test_an_imported_bundle_reads_back_to_the_same_results(store, bundle, tmp_path):
    documents = "every evaluation"
    manifest = {"format": FORMAT, "numerics": NUMERICS, "runs": 2, "documents": documents}
    assert bundle_manifest(bundle) == manifest
    assert import_bundle(bundle, tmp_path / "copy") == (2, 0)
    copied = _files(tmp_path / "copy")
    assert copied == {name: data for name, data in _files(store).items() if name in copied}
    assert len(copied) > 6 and not list((tmp_path / "copy").rglob("*.pt"))
    ids = sorted(p.name for p in (tmp_path / "copy").iterdir())
    for original, imported in zip(load_results(store, ids), load_results(tmp_path / "copy")):
        pd.testing.assert_frame_equal(original, imported)


def _project(folder: Path) -> Path:
    """An empty project root (what repro.paths.project_root looks for)."""
    (folder / "repro").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("")
    return folder


def _configs(bundle: Path) -> dict[str, dict]:
    with tarfile.open(bundle) as archive:
        return {
            info.name.split("/")[0]: json.load(archive.extractfile(info))
            for info in archive
            if info.name.endswith("/config.json")
        }


def test_a_bundle_names_no_folder_of_the_machine_that_trained_it(synthetic_pool, tmp_path):
    """Pools travel relative to the project root and a branch's checkpoint relative to its
    store; import resolves them where the runs land. Old bundles' absolute paths read the same."""
    trained = _project(tmp_path / "trained")
    shutil.copytree(synthetic_pool, trained / "data" / "pools" / "p")
    store = trained / "runs" / "s" / "store"
    run_sweep(_grid(trained / "data" / "pools" / "p"), store, workers=1, progress=False)
    trunk, branch = sorted(p.parent.name for p in store.glob("*/config.json"))
    config = json.loads((store / branch / "config.json").read_text())
    config["init_from"] = str(store / trunk / "checkpoints" / "step-4.pt")
    (store / branch / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    out = tmp_path / "runs.tar.xz"
    export_bundle(store, out)
    shipped = _configs(out)
    assert {c["pool"] for c in shipped.values()} == {"data/pools/p"}
    assert shipped[branch]["init_from"] == f"{trunk}/checkpoints/step-4.pt"
    assert import_bundle(out, store) == (0, 2), "the trained store's runs are the bundle's"
    elsewhere = _project(tmp_path / "elsewhere")
    into = elsewhere / "runs" / "s" / "store"
    assert import_bundle(out, into) == (2, 0)
    landed = json.loads((into / branch / "config.json").read_text())
    assert landed["pool"] == str(elsewhere / "data" / "pools" / "p")
    assert landed["init_from"] == str(into / trunk / "checkpoints" / "step-4.pt")
    assert config | {"pool": landed["pool"], "init_from": landed["init_from"]} == landed
    old = tmp_path / "old.tar.xz"
    with tarfile.open(out) as source, tarfile.open(old, "w:xz") as target:
        for info in source:
            data = source.extractfile(info).read() if info.isfile() else None
            if info.name == f"{branch}/config.json":
                data = (store / branch / "config.json").read_bytes()  # the trainer's paths
                info.size = len(data)
            target.addfile(info, io.BytesIO(data) if data is not None else None)
    assert import_bundle(old, into) == (0, 2), "an old bundle's run is the same run"


def test_a_file_held_twice_is_stored_once_and_imported_twice(store, bundle, tmp_path):
    """A run whose files repeat another's (as a WSD branch repeats its trunk's evaluations before
    the branch point) adds hard links, not bytes; importing writes both runs whole."""
    twice = tmp_path / "twice"
    shutil.copytree(store, twice)
    first = sorted(p for p in twice.iterdir() if (p / "status.json").is_file())[0]
    shutil.copytree(first, twice / "fedcba987654")
    out = tmp_path / "twice.tar.xz"
    assert export_bundle(twice, out) == 3
    with tarfile.open(out) as archive:
        links = {info.name for info in archive if info.islnk()}
    files = _files(twice)
    again = {name for name in files if name.startswith("fedcba987654/")}
    assert again and again <= links  # and the runs' shared val_docs/tokens.npy
    assert out.stat().st_size < bundle.stat().st_size * 1.2
    assert import_bundle(out, tmp_path / "copy") == (3, 0)
    copied = _files(tmp_path / "copy")
    assert copied == {name: data for name, data in files.items() if name in copied}
    assert again <= set(copied)


def _evaluated(run: RunDir) -> list[int]:
    return [int(r["step"]) for r in run.metrics() if "val_loss" in r]


def test_a_bundle_of_what_the_analyses_read(store, tmp_path):
    """Exported with the analyses' record (documents_read): per-document losses only at each
    run's last evaluation and those read; every evaluation's half losses in halves.json, read
    back to the same floats; a left-out evaluation is a one-line error saying why; re-exporting
    the imported runs gives the same bytes, and the original store takes it as its own runs."""
    first, second = sorted(p for p in store.iterdir() if (p / "status.json").is_file())
    early = _evaluated(RunDir(first))[0]
    out = tmp_path / "read.tar.xz"
    assert export_bundle(store, out, {first.name: {early}}) == 2
    assert bundle_manifest(out)["documents"] == "the last and those the analyses read"
    import_bundle(out, tmp_path / "copy")
    for run, kept in ((first, {early}), (second, set())):
        original, copy = RunDir(run), RunDir(tmp_path / "copy" / run.name)
        steps = _evaluated(original)
        held = {int(p.stem[5:]) for p in copy.docs_dir.glob("step-*.npy")}
        assert len(steps) == 2 and held == kept | {steps[-1]}
        assert copy.halves_file.is_file() == (held != set(steps))
        for step in steps:
            assert copy.half_losses(step) == original.half_losses(step)
    with pytest.raises(ReproError, match="bundle holds them only at the evaluations the analyses"):
        RunDir(tmp_path / "copy" / second.name).document_losses(_evaluated(RunDir(second))[0])
    assert export_bundle(tmp_path / "copy", tmp_path / "again.tar.xz", {first.name: {early}}) == 2
    assert (tmp_path / "again.tar.xz").read_bytes() == out.read_bytes()
    assert import_bundle(out, store) == (0, 2)
    left_out = RunDir(tmp_path / "copy" / second.name)
    left_out.halves_file.write_text(json.dumps({"1": [1.0]}))
    step = _evaluated(left_out)[0]
    with pytest.raises(ReproError, match=f"halves.json holds no pair of losses at step {step}: "):
        left_out.half_losses(step)


def test_a_bundle_of_the_analyses_keeps_each_runs_last_evaluation(store, tmp_path):
    """Whatever its status.json says (a diverged run's last step has no evaluation), a run keeps
    the per-document losses of its last evaluation; a record naming an evaluation or a run that
    the store does not hold is a one-line error, before anything is written."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    first = sorted(p for p in copy.iterdir() if (p / "status.json").is_file())[0]
    status = json.loads((first / "status.json").read_text())
    (first / "status.json").write_text(json.dumps(status | {"status": "diverged", "step": 1}))
    out = tmp_path / "b.tar.xz"
    export_bundle(copy, out, {})
    with tarfile.open(out) as archive:
        kept = [n for n in archive.getnames() if n.startswith(f"{first.name}/val_docs/step-")]
    assert kept == [f"{first.name}/val_docs/step-{_evaluated(RunDir(first))[-1]}.npy"]
    for read, says in (
        ({first.name: {3}}, "has no per-document losses at step 3"),
        ({"fedcba987654": {3}}, "names run fedcba987654, which"),
    ):
        with pytest.raises(ReproError, match=says):
            export_bundle(copy, tmp_path / "c.tar.xz", read)
        assert not (tmp_path / "c.tar.xz").exists()


def test_a_store_folder_that_is_not_the_bundles_run_is_refused(bundle, tmp_path):
    """A folder of the same name that lacks the run's files (an interrupted run: config.json
    only) is not the bundle's run, though every file it holds matches."""
    with tarfile.open(bundle) as archive:
        rid = next(n.split("/")[0] for n in archive.getnames() if n.endswith("config.json"))
        config = archive.extractfile(f"{rid}/config.json").read()
    (tmp_path / "s" / rid).mkdir(parents=True)
    (tmp_path / "s" / rid / "config.json").write_bytes(config)
    with pytest.raises(ReproError, match=f"{rid} holds other contents than"):
        import_bundle(bundle, tmp_path / "s")


def test_the_records_of_what_the_notebooks_read(tmp_path):
    """documents_read: the union of a figures folder's records; none is a one-line error."""
    with pytest.raises(ReproError, match="holds no \\*_documents_read.json .*without --read"):
        documents_read(tmp_path)
    (tmp_path / "02_documents_read.json").write_text(json.dumps({"a": [3, 6], "b": [6]}))
    (tmp_path / "04_documents_read.json").write_text(json.dumps({"a": [4]}))
    assert documents_read(tmp_path) == {"a": {3, 4, 6}, "b": {6}}
    (tmp_path / "05_documents_read.json").write_text(json.dumps({"a": "4"}))
    with pytest.raises(ReproError, match="05_documents_read.json: a holds no list of steps"):
        documents_read(tmp_path)


def test_the_shipped_bundles_are_of_these_numerics_and_built_in_presets():
    """A NUMERICS change makes every shipped run stale: ship the bundles again with it. Each
    volume fits the repository's limit on a tracked file."""
    shipped = sorted((ROOT / "results").glob("*.tar.xz"))
    firsts = [p for p in shipped if ".part" not in p.name]
    assert {p.name.removesuffix(".tar.xz") for p in firsts} <= set(PRESETS)
    assert sorted(v for p in firsts for v in volumes(p)) == shipped
    for bundle in shipped:
        assert bundle_manifest(bundle)["numerics"] == NUMERICS, bundle
        assert bundle.stat().st_size <= bundle_module.MAX_VOLUME_BYTES, bundle


def test_the_same_store_exports_the_same_bytes(store, bundle, tmp_path):
    export_bundle(store, tmp_path / "again.tar.xz")
    assert (tmp_path / "again.tar.xz").read_bytes() == bundle.read_bytes()


def test_importing_twice_adds_nothing_the_second_time(bundle, tmp_path):
    import_bundle(bundle, tmp_path / "s")
    assert import_bundle(bundle, tmp_path / "s") == (0, 2)


def test_a_run_the_store_holds_otherwise_is_never_replaced(bundle, tmp_path):
    """Refused before any write: the other run is not imported either."""
    import_bundle(bundle, tmp_path / "s")
    first, second = sorted(p for p in (tmp_path / "s").iterdir())
    (first / "metrics.jsonl").write_text("mine\n")
    shutil.rmtree(second)
    with pytest.raises(ReproError, match=f"^{first} holds other contents than"):
        import_bundle(bundle, tmp_path / "s")
    assert (first / "metrics.jsonl").read_text() == "mine\n" and not second.exists()


def _tar(path, entries: dict[str, bytes], *more: tuple[str, bytes]) -> None:
    """A bundle of `entries`, then `more` (names that may repeat)."""
    with tarfile.open(path, "w:xz") as archive:
        for name, data in [*entries.items(), *more]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ({"bundle.json": b"{}", "../evil": b"x"}, "holds '../evil', which no bundle holds"),
        ({"bundle.json": b"{}", "0123456789ab/notes.txt": b"x"}, "which no bundle holds"),
        ({"0123456789ab/config.json": b"{}"}, "has no readable bundle.json"),
        ({"bundle.json": json.dumps({"numerics": 0}).encode()}, "holds runs of numerics 0"),
    ],
)
def test_a_bundle_that_is_not_one_is_refused_before_any_write(tmp_path, entries, says):
    _tar(tmp_path / "b.tar.xz", entries)
    with pytest.raises(ReproError, match=says) as error:
        import_bundle(tmp_path / "b.tar.xz", tmp_path / "s")
    assert "\n" not in str(error.value) and not (tmp_path / "s").exists()


def test_a_damaged_bundle_is_one_line(bundle, tmp_path):
    (tmp_path / "b.tar.xz").write_bytes(bundle.read_bytes()[: len(bundle.read_bytes()) // 2])
    with pytest.raises(ReproError, match="is not a readable results bundle"):
        import_bundle(tmp_path / "b.tar.xz", tmp_path / "s")


def test_the_commands_export_and_import(store, tmp_path, capsys):
    main(["results", "export", str(store), "--out", str(tmp_path / "b.tar.xz")])
    main(["results", "import", str(tmp_path / "b.tar.xz"), "--into", str(tmp_path / "s")])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 'b.tar.xz'}: 2 runs, ") and out[0].endswith(" MiB")
    assert out[1] == f"{tmp_path / 's'}: 2 runs added, 0 already there"
    with pytest.raises(SystemExit) as exit_info:  # never overwrites the user's file
        main(["results", "export", str(store), "--out", str(tmp_path / "b.tar.xz")])
    assert exit_info.value.code == 2 and "exists; choose another --out" in capsys.readouterr().err


def test_a_study_without_training_reads_the_shipped_bundle(synthetic_pool, bundle, tmp_path):
    """Study.train False: no run trains; the runs come from results/<preset>.tar.xz, and a study
    without them says how to train them."""
    preset = changed(get_preset("smoke"), growth={"rounds": 0})
    study = Study(preset, tmp_path, tmp_path / "pools", tmp_path / "runs", 1, train=False)
    with pytest.raises(ReproError, match="2 of 2 runs are not in .*: train them with repro"):
        study.sweep(_grid(synthetic_pool))
    study.shipped.parent.mkdir()
    study.shipped.write_bytes(bundle.read_bytes())
    results = study.sweep(_grid(synthetic_pool))
    assert sorted(results.runs["status"]) == ["done", "done"]
    planned = {p.run_id for p in plan_grid(_grid(synthetic_pool), study.store)}
    assert planned == set(results.runs["run_id"]) and not list(study.store.rglob("*.pt"))
    steps = results.evals.groupby("run_id")["step"].agg(list)  # the last of each: checked
    rid = sorted(planned)[0]
    results.documents(rid, steps[rid][0])
    study.save_table(pd.DataFrame({"x": [1]}), "07_table")
    read = {r: s if r == rid else s[-1:] for r, s in steps.items()}
    assert json.loads((study.figures / "07_documents_read.json").read_text()) == read


def _members(bundle) -> dict[str, bytes]:
    """A bundle's files by name, each hard link as the bytes it links to."""
    members: dict[str, bytes] = {}
    with tarfile.open(bundle) as archive:
        for info in archive:
            linked = members.get(info.linkname) if info.islnk() else None
            members[info.name] = linked if linked is not None else archive.extractfile(info).read()
    return members


def _refused(bundle, store, says: str) -> None:
    """Import refuses `bundle` in one line matching `says`, the store never created."""
    with pytest.raises(ReproError, match=says) as error:
        import_bundle(bundle, store)
    assert "\n" not in str(error.value) and not store.exists()


def test_a_member_past_the_size_limit_is_refused_from_its_header(bundle, tmp_path):
    """A header that claims 1 GiB for a few bytes (as a sparse member does): refused before a
    byte of it is read or written."""
    path, manifest = tmp_path / "b.tar.xz", _members(bundle)["bundle.json"]
    with tarfile.open(path, "w:xz") as archive:
        info = tarfile.TarInfo("bundle.json")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("0123456789ab/metrics.jsonl")
        info.size = 2**30
        archive.addfile(info)  # the header alone: its bytes are not there
    assert path.stat().st_size < 1_000
    _refused(path, tmp_path / "s", "holds '0123456789ab/metrics.jsonl' of 1,073,741,824 bytes")


def test_a_member_that_reads_past_the_limit_is_refused_while_read(bundle, tmp_path, monkeypatch):
    """A reader that yields more than its header says is cut at the limit, read in chunks."""
    monkeypatch.setattr("repro.store.bundle.MAX_MEMBER_BYTES", 2**20)
    monkeypatch.setattr("repro.store.bundle.READ_CHUNK", 2**12)
    extract = tarfile.TarFile.extractfile
    endless = io.BytesIO(b"{}" * 2**20)  # 2 MiB behind a small header

    def lying(archive, info):
        return endless if info.name.endswith("metrics.jsonl") else extract(archive, info)

    monkeypatch.setattr(tarfile.TarFile, "extractfile", lying)
    _refused(bundle, tmp_path / "s", "metrics.jsonl' of 1,052,672 bytes or more")
    assert endless.tell() == 2**20 + 2**12  # read in chunks: stopped one chunk past the limit


def test_a_bundle_past_the_limit_in_all_is_refused(bundle, tmp_path, monkeypatch):
    """Hard links count: each unpacks to a file of its own."""
    members = _members(bundle)
    linked = sum(len(members[n]) for n in members if "/" in n)  # bytes unpacked, links too
    monkeypatch.setattr(
        "repro.store.bundle.MAX_BUNDLE_BYTES", len(members["bundle.json"]) + linked - 1
    )
    _refused(bundle, tmp_path / "s", "past a bundle's limits")
    monkeypatch.setattr("repro.store.bundle.MAX_BUNDLE_BYTES", len(members["bundle.json"]) + linked)
    assert import_bundle(bundle, tmp_path / "s") == (2, 0)


def test_a_member_held_twice_is_refused(bundle, tmp_path):
    """Not the later one winning."""
    members = _members(bundle)
    name = next(n for n in members if n.endswith("/config.json"))
    _tar(tmp_path / "b.tar.xz", members, (name, members[name]))
    _refused(tmp_path / "b.tar.xz", tmp_path / "s", f"holds '{name}' twice")


@pytest.mark.parametrize(
    ("file", "damage", "says"),
    [
        ("config.json", b"garbage", "config.json is not valid JSON"),
        ("status.json", b'{"status": "running"}', "status.json records no finished run"),
        ("metrics.jsonl", b'{"step": 1}\n{"st', "metrics.jsonl line 2 is torn"),
        ("metrics.jsonl", b"garbage\n", "metrics.jsonl line 1 is not a JSON object"),
        ("val_docs/tokens.npy", b"garbage", "val_docs is damaged"),
    ],
)
def test_a_damaged_run_file_is_refused_at_import_naming_it(bundle, tmp_path, file, damage, says):
    """Each file read once by its rule (RunDir.check_results) before any run lands: the bundle's
    other, intact run does not land either."""
    members = _members(bundle)
    rid = sorted(n.split("/")[0] for n in members if "/" in n)[0]
    members[f"{rid}/{file}"] = damage
    _tar(tmp_path / "b.tar.xz", members)
    _refused(
        tmp_path / "b.tar.xz",
        tmp_path / "s",
        f"^{tmp_path / 'b.tar.xz'} holds a damaged run.*{rid}/{says}",
    )


def test_export_refuses_a_torn_run(store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    metrics = sorted(copy.glob("*/metrics.jsonl"))[0]
    metrics.write_bytes(metrics.read_bytes()[:-5])  # a truncated last line
    with pytest.raises(ReproError, match=f"^{metrics} line \\d+ is torn"):
        export_bundle(copy, tmp_path / "b.tar.xz")
    assert not list(tmp_path.glob("b.tar.xz*"))


def test_a_large_store_is_exported_in_volumes_that_import_whole(store, tmp_path, monkeypatch):
    """Past VOLUME_BYTES a bundle continues in NAME.part2.tar.xz, ...: each volume a bundle of its
    own, a trunk's branches in its volume; importing the first reads them all."""
    monkeypatch.setattr(bundle_module, "VOLUME_BYTES", 1)  # every family its own volume
    out = tmp_path / "b.tar.xz"
    assert export_bundle(store, out) == 2
    assert volumes(out) == [out, tmp_path / "b.part2.tar.xz"]
    assert [bundle_manifest(v)["runs"] for v in volumes(out)] == [1, 1]
    main(["results", "import", str(out), "--into", str(tmp_path / "s")])
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(
        p.name for p in store.iterdir() if RunDir(p).is_finished()
    )
    with pytest.raises(ReproError, match=r"b\.part2\.tar\.xz exists"):  # no stale volume mixed in
        (tmp_path / "b.tar.xz").unlink()
        export_bundle(store, out)
