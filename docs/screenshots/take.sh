#!/usr/bin/env bash
# Screenshots of each committed notebook's claims and summary as a browser renders them: the cells
# from "## Claims vs measurement" on, converted by nbconvert and drawn by headless Chromium
# (apt-get install chromium). Run from the repository root: bash docs/screenshots/take.sh
set -euo pipefail
out=docs/screenshots
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 - "$scratch" <<'PY'
import sys
from pathlib import Path

import nbformat

for path in sorted(Path("notebooks").glob("0*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    start = next(
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown" and cell.source.startswith("## Claims vs measurement")
    )
    nb.cells = nb.cells[start:]
    nbformat.write(nb, Path(sys.argv[1]) / path.name)
PY
jupyter nbconvert --to html "$scratch"/*.ipynb --output-dir "$scratch" --log-level WARN
for page in "$scratch"/*.html; do
  name="$(basename "$page" .html)"
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1600 \
    --screenshot="$out/$name.png" "file://$page" 2>/dev/null
done
