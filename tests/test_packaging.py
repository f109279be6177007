"""The install contract: every third-party module the package, the notebooks and the tests import is
declared in pyproject.toml, and CI runs exactly the README's test command."""

import ast
import importlib.metadata
import re
import sys
import tomllib
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


def test_package_and_notebooks_import_only_declared_dependencies():
    paths = [*ROOT.glob("repro/**/*.py"), *ROOT.glob("notebooks/*.py")]
    assert _undeclared(paths, _declared()) == []


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
