"""The install contract: every third-party module the package, the notebooks and the tests import is
declared in pyproject.toml, and CI runs exactly the README's test command."""

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extras: tuple[str, ...] = ()) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_normalise(re.match(r"[A-Za-z0-9_.-]+", r).group()) for r in requirements}


def _imported_modules(paths: list[Path]) -> set[str]:
    """Top-level names of absolute imports in `paths`, less the standard library and repro."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"repro"}


def _undeclared(paths: list[Path], declared: set[str]) -> list[str]:
    """Imported modules whose installed distribution is not in `declared` (or is not installed)."""
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(_imported_modules(paths)):
        dists = {_normalise(d) for d in distributions.get(module, [])}
        if not dists & declared:
            missing.append(f"{module} (from {', '.join(sorted(dists)) or 'no installed package'})")
    return missing


EXTRA_MODULES = {"bench/peers.py": "bench", "store/downstream.py": "eval"}  # repro/<module>: extra


def test_package_and_notebooks_import_only_declared_dependencies():
    paths = [*ROOT.glob("repro/**/*.py"), *ROOT.glob("notebooks/*.py")]
    extras = {ROOT / "repro" / module for module in EXTRA_MODULES}
    assert all(path.is_file() for path in extras)
    assert _undeclared([p for p in paths if p not in extras], _declared()) == []
    for module, extra in EXTRA_MODULES.items():
        assert _undeclared([ROOT / "repro" / module], _declared((extra,))) == []


def test_tests_import_only_declared_dependencies():
    paths = [*ROOT.glob("tests/*.py"), ROOT / "conftest.py"]
    assert _undeclared(paths, _declared(("dev",))) == []


def test_undeclared_import_is_caught(tmp_path):
    module = tmp_path / "uses_scipy.py"
    module.write_text("import numpy\nfrom scipy.optimize import least_squares\nimport os\n")
    assert _undeclared([module], {"numpy"}) == ["scipy (from scipy)"]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n# tests[^\n]*\n(.*?)```", readme, re.S).group(1).strip()
    command = block.splitlines()[-1]
    ci_lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci_lines[-1] == command


def _fake_wheel(folder: Path, version: str) -> None:
    """An empty wheel of a distribution named torch at `version`."""
    info = f"torch-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"torch-{version}-py3-none-any.whl", "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)


def test_pip_prefers_the_cpu_build_when_an_index_offers_both(tmp_path):
    """README: with PyTorch's CPU index added, `torch==2.13.0` resolves to 2.13.0+cpu (a local
    version label ranks above the plain release), not to the plain (CUDA) release of PyPI."""
    _fake_wheel(tmp_path, "2.13.0")
    _fake_wheel(tmp_path, "2.13.0+cpu")
    pip = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--no-deps"]
    report = tmp_path / "report.json"
    subprocess.run(
        [*pip, "--ignore-installed", "--no-index", "--find-links", str(tmp_path),
         "--report", str(report), "--quiet", "torch==2.13.0"],
        check=True,
    )  # fmt: skip
    chosen = json.loads(report.read_text())["install"]
    assert [item["metadata"]["version"] for item in chosen] == ["2.13.0+cpu"]
