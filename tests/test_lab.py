"""JupyterLab as users open it: every notebook and paired script of notebooks/, opened and saved
through a real Jupyter server's contents API (jupytext's contents manager, as JupyterLab uses it)
with the metadata JupyterLab sets from the kernel it starts, changes no file. The committed
notebooks carry that metadata (the kernel's language_info includes its Python version, so on
another version that one line changes)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TOKEN = "repro-test"


def _api(port: int, path: str, body: dict | None = None) -> dict:
    """GET (or, with `body`, PUT) /api/<path> of the server on `port`."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "PUT",
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _kernel_metadata() -> dict:
    """kernelspec and language_info as JupyterLab writes them once its python3 kernel started."""
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        info = client.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    spec = manager.kernel_spec
    kernelspec = {"display_name": spec.display_name, "language": spec.language, "name": "python3"}
    return {"kernelspec": kernelspec, "language_info": info}


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """A Jupyter server over a copy of notebooks/; (port, root)."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(NOTEBOOKS, root / "notebooks")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "jupyter_server", f"--port={port}", "--no-browser"),
            *("--allow-root", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _api(port, "status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield port, root
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_opening_and_saving_each_notebook_in_jupyterlab_changes_no_file(lab_server):
    port, root = lab_server
    folder = root / "notebooks"
    metadata = _kernel_metadata()
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for path in sorted(folder.glob("[0-9][0-9]_*")):  # .ipynb and .py: both open as notebooks
        model = _api(port, f"contents/notebooks/{path.name}?content=1")
        assert model["type"] == "notebook"
        model["content"]["metadata"].update(metadata)
        body = {"type": "notebook", "format": "json", "content": model["content"]}
        _api(port, f"contents/notebooks/{path.name}", body)
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert set(after) == set(before) and not changed, (
        f"saving in JupyterLab rewrites {changed}: give the committed notebooks the metadata "
        "JupyterLab writes (kernelspec, language_info, jupytext)"
    )
