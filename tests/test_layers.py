"""The layers are enforced, not claimed: `lint-imports` checks pyproject.toml's contracts (data flows
up from results/stats/config to the CLI; the report and the statistics import no torch), and the
contract would catch the imports that once ran both ways (report -> sweep, stats -> report); inside every room
(activations/, config/, sweep/, report/, results/, ...) no two modules import each other, even through a
function-level import (acyclic_siblings)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is a dev dependency (pip install -e '.[dev]')"
    return subprocess.run(
        [exe, "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(cwd), "PATH": str(Path(sys.executable).parent)},
    )


def test_every_import_follows_the_layers():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.lower() or "0 broken" in result.stdout


@pytest.mark.parametrize(
    "module, line",
    [
        ("report/summary.py", "from ..sweep import locks"),  # the report reading the sweep
        ("stats/significance.py", "from ..report import collect"),  # statistics above the report
        ("report/collect.py", "import torch"),  # the report loading torch
        ("results/layout.py", "from ..train import step"),  # the bottom floor reaching up
        ("results/evidence.py", "from . import record"),  # a circle inside results/ (record imports evidence)
        ("report/html.py", "from . import sections"),  # a circle inside report/ (sections imports html)
        ("activations/triton_template.py", "from . import triton_ops"),  # inside activations/ (ops import the template)
        ("config/keys.py", "from . import validate"),  # a circle inside config/ (validate imports keys)
        ("sweep/placement.py", "def later():\n    from . import sweep"),  # inside sweep/, even in a function
    ],
)
def test_the_contract_fails_on_an_upward_import(tmp_path, module, line):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "visionbench", tree / "visionbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    target = tree / "visionbench" / module
    target.write_text(target.read_text() + "\n" + textwrap.dedent(line) + "  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0, f"lint-imports accepted {line!r} in {module}"


# one fresh interpreter imports the bottom floor, then the report on it, checking after each import what it loaded
# (the contract above checks the import statements; this, what importing really loads: lazy imports, plugins)
NO_TORCH = """
import importlib, json, sys
heavy = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision", "lightning", "timm"))
importlib.import_module("visionbench.config")
loaded = {"visionbench.config": heavy() + sorted(m for m in sys.modules if m.startswith("visionbench.")
                                                 and m != "visionbench" and not m.startswith("visionbench.config"))}
for module in ("visionbench.results", "visionbench.stats", "visionbench.report"):
    importlib.import_module(module)
    loaded[module] = heavy()
print(json.dumps(loaded))
"""


def test_reading_results_loads_no_torch():
    """The config (a bottom floor: Hydra, OmegaConf and YAML, no other room of visionbench), the results files, the
    statistics and the report load no torch, Lightning or timm: `visionbench report` runs where torch is missing."""
    import json

    out = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout)
    assert list(loaded) == ["visionbench.config", "visionbench.results", "visionbench.stats", "visionbench.report"]
    assert all(v == [] for v in loaded.values()), loaded


def test_a_file_over_400_lines_is_one_docs_layout_md_names():
    # a file reads in one sitting; the few whose one job needs more are named, each with that job, on the layout page
    page = (ROOT / "docs" / "layout.md").read_text()
    block = page.split("### Long files", 1)[1].split("```", 2)[1]
    named = {line.split()[0] for line in block.splitlines() if line.strip()}
    long = {
        str(p.relative_to(ROOT / "visionbench"))
        for p in (ROOT / "visionbench").rglob("*.py")
        if len(p.read_text().splitlines()) > 400
    }
    assert long <= named, f"over 400 lines, not named in docs/layout.md 'Long files': {sorted(long - named)}"
    assert named <= {str(p.relative_to(ROOT / "visionbench")) for p in (ROOT / "visionbench").rglob("*.py")}
