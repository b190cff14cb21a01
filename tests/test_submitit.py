"""The cluster path, exercised for real (docs/running.md, "GPUs and clusters").

The documented SLURM command (README.md and docs/running.md, the same line) is run with Hydra's
`submitit_local` launcher in place of `submitit_slurm`: submitit's local executor starts every
(act, seed) job as a process of its own, pickled and unpickled as on SLURM. Both jobs write into one
results tree, `visionbench report` aggregates them, and the job made to fail (a file blocks its
checkpoint folder: the run trains its epoch, then cannot save) is reported as failed, while the
launching command exits non-zero naming it. The only additions to the documented command are a
temporary `results_dir`, Hydra's sweep folder and a one-epoch, 100-image protocol.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from visionbench.report import main as report_main

from .helpers import shrunk

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = "hydra_plugins.hydra_submitit_launcher"
needs_submitit = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins") is None or importlib.util.find_spec(LAUNCHER) is None,
    reason=f"{LAUNCHER} is not installed (the slurm extra: pip install -e '.[slurm]'; `make install` includes it)",
)
# the test's protocol: tests/helpers.py's shrink, one epoch of 100 images; the jobs (act, seed) stay the doc's
TINY = shrunk("epochs=1", "data.limit_train=100", "data.limit_val=50")


def documented(path: Path) -> tuple[str, str | None]:
    """(the SLURM launch command, the report command after it, if any) as `path` prints them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = next(i for i, line in enumerate(lines) if "hydra/launcher=submitit_slurm" in line)
    launch = re.sub(r"\s+#.*$", "", lines[i]).strip()  # README's command block has trailing comments
    report = next(
        (re.sub(r"\s+#.*$", "", s).strip() for s in lines[i + 1 :] if s.strip().startswith("visionbench report")), None
    )
    return launch, report


def test_readme_and_running_md_print_the_same_slurm_command():
    assert documented(ROOT / "README.md")[0] == documented(ROOT / "docs" / "running.md")[0]


@pytest.mark.slow
@pytest.mark.serial  # ~40 s of submitit processes; the default suite's sibling: tests/test_runner.py's Hydra multirun
@needs_submitit  # test (the same hydra_app jobs into one tree, a failed job making the command exit non-zero)
def test_submitit_local_jobs_share_one_tree_one_report_and_a_failed_job_is_reported(tmp_path):
    launch, report = documented(ROOT / "docs" / "running.md")
    argv = shlex.split(launch.replace("submitit_slurm", "submitit_local"))
    assert argv[:3] == ["python", "-m", "visionbench.sweep.hydra_app"], launch
    results = tmp_path / "results"
    recipe = Path(shlex.split(report)[-1]).name  # results/digits_vgg4 -> digits_vgg4
    jobs = [(act, int(seed)) for act in _values(argv, "act") for seed in _values(argv, "seed")]
    assert len(jobs) == 2, jobs
    failing = jobs[-1]
    blocked = results / recipe / failing[0] / f"seed_{failing[1]}"
    blocked.mkdir(parents=True)
    (blocked / "checkpoints").write_text("not a folder")  # the run's checkpoint cannot be written

    cmd = [sys.executable, *argv[1:], f"results_dir={results}", *TINY, f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert f"{recipe} {failing[0]} seed {failing[1]} failed" in out, out[-3000:]
    assert "Submitit 'local' sweep output dir" in out  # it was the submitit launcher, not Hydra's basic one
    logs = list((tmp_path / "multirun" / ".submitit").rglob("*_log.out"))
    assert len(logs) == len(jobs)  # one submitit job (one process) per (act, seed)

    status = {
        (act, seed): json.loads((results / recipe / act / f"seed_{seed}" / "summary.json").read_text())["status"]
        for act, seed in jobs
    }
    assert status == {**{job: "completed" for job in jobs[:-1]}, failing: "failed"}
    assert report_main([str(results / recipe), "--no-plots"]) == 0
    table = pd.read_csv(results / recipe / "table.csv").set_index("act")
    assert sorted(table.index) == sorted({act for act, _ in jobs})
    # one epoch of 100 images: a job's run is scored (n) or at chance (n_stalled), never lost
    assert table.loc[failing[0], "n_failed"] == 1 and table.loc[jobs[0][0], ["n", "n_stalled"]].sum() == 1


def _values(argv: list[str], key: str) -> list[str]:
    """The comma list of `key=a,b` in `argv` (one value per Hydra job)."""
    (text,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"{key}=")]
    return text.split(",")
