"""The package's layers: runtime code (what the trainer runs) apart from analysis code (what the
notebooks run), and the modules that must load without torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "repro"
ORCHESTRATION = ("repro.store", "repro.study", "repro.reproduce", "repro.cli", "repro.plan")
ORCHESTRATION += ("repro.bench.measure",)
TORCH_FREE_RUNTIME = ("config", "files", "loaders", "run_dir", "schedules", "shapes")
DESIGN = ("repro.design",)
LAYERS = ("data", "runtime", "design", "store", "analysis", "bench")  # the subpackages
TOP_LEVEL = 8  # modules beside the subpackages, at most
LONGEST = 600  # lines of one module, at most


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).glob("*.py"))


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", [*_modules("runtime"), *_modules("data")], ids=lambda p: p.stem)
def test_runtime_and_data_import_no_analysis_presets_or_orchestration(path):
    above = ("repro.analysis", *DESIGN, *ORCHESTRATION)
    assert not [name for name in _imports(path) if _within(name, above)]


@pytest.mark.parametrize("path", _modules("design"), ids=lambda p: p.stem)
def test_the_design_imports_no_analysis_or_orchestration(path):
    assert not [n for n in _imports(path) if _within(n, ("repro.analysis", *ORCHESTRATION))]


@pytest.mark.parametrize("path", _modules("store"), ids=lambda p: p.stem)
def test_the_store_imports_no_design_or_analysis(path):
    """Sweeps, launches, bundles and downstream evaluation work on runs: they know nothing of a
    preset or of the analyses."""
    assert not [n for n in _imports(path) if _within(n, ("repro.analysis", *DESIGN))]


def test_the_package_is_laid_out_by_layer():
    """The README's layers are the subpackages; few modules beside them, none over a screenful
    of screens."""
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(LAYERS)
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(top) <= TOP_LEVEL, top
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > LONGEST
    }
    assert not long


@pytest.mark.parametrize("path", _modules("analysis"), ids=lambda p: p.stem)
def test_analysis_imports_no_torch_training_or_orchestration(path):
    allowed = tuple(f"repro.runtime.{name}" for name in TORCH_FREE_RUNTIME)
    wrong = [
        name
        for name in _imports(path)
        if _within(name, ("torch", *ORCHESTRATION))
        or (_within(name, ("repro.runtime",)) and not _within(name, allowed))
    ]
    assert not wrong


def test_presets_analysis_and_the_torch_free_runtime_load_without_torch():
    """What `repro --help`, `repro plan` and the notebooks' analyses load never imports torch
    (the trainer's modules do)."""
    modules = [f"repro.runtime.{name}" for name in TORCH_FREE_RUNTIME]
    modules += [f"repro.design.{path.stem}" for path in _modules("design")]
    modules += ["repro.cli", "repro.data.build"]
    modules += [f"repro.analysis.{path.stem}" for path in _modules("analysis")]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint('torch' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "False"
