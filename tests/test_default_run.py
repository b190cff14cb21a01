"""The default run checks itself: `visionbench run` (the embedded default: digits, VGG4, relu/gelu/rational/hermite,
3 seeds, `trainer.portable=true`) trained afresh, then `visionbench compare` against the committed record
results/digits_vgg4/record must read `identical` for every activation — so no change to the code can move a
committed number without this test failing (a metric whose weighting changed did, once, unnoticed).

Slow (≈ 3 minutes on 2 cores: 12 runs of 15 epochs) and in `make test-slow`, which `.ci/run` runs on a clean clone
right after `make run` has trained the same default into the checkout's runs/: where every one of those runs was
trained by this very commit (clean) at the record's configuration, the test reads them instead of training again.
Bits are only promised where the record was made: the same CPU model with AVX2 (docs/reproducing.md). On another
CPU model the test does not pass: it is skipped, saying which CPU it ran on, which CPU made the record, and what
`compare` said, so that a reader sees that the claim was not checked there rather than that it held."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from visionbench.results import layout
from visionbench.results.io import RunStateError
from visionbench.results.provenance import git_commit
from visionbench.results.record import opened
from visionbench.train.environment import cpu_model

from .helpers import ROOT

RECORD = ROOT / "results" / "digits_vgg4" / "record"
ACTS = {"relu", "gelu", "hermite", "rational"}


def record_cpu() -> set[str]:
    """The CPU models the committed record's runs were trained on (their summaries' environment)."""
    with opened(RECORD) as tree:
        return {
            str(((layout.read_summary(run).get("environment") or {}).get("device") or {}).get("cpu"))
            for run in layout.find_run_dirs(tree)
        }


def made_by_make_run() -> Path | None:
    """This checkout's runs/ when `make run` has trained every run of the default in it with this very commit, clean,
    at the record's configuration (what .ci/run does just before the tests): the default run of this code, which the
    test reads instead of training it a second time (4 minutes of CI). None otherwise: the test trains afresh."""
    runs, commit = ROOT / "runs", git_commit()
    if not commit or commit.endswith("+dirty"):
        return None
    with opened(RECORD) as tree:
        recorded = {layout.read_summary(run).get("config_hash") for run in layout.find_run_dirs(tree)}
    for act in ACTS:
        for seed in range(3):
            try:
                summary = layout.read_summary(layout.run_path(runs, "digits_vgg4", act, seed)) or {}
            except RunStateError:
                return None
            if (summary.get("status"), summary.get("git_commit")) != ("completed", commit) or {
                summary.get("config_hash")
            } != recorded:
                return None
    return runs


@pytest.mark.slow
def test_the_default_run_reads_identical_to_the_committed_record(tmp_path):
    runs = made_by_make_run()
    if runs is None:
        runs = tmp_path / "runs"
        trained = subprocess.run(
            [sys.executable, "-m", "visionbench.cli", "run", f"results_dir={runs}"],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=tmp_path,
        )
        assert trained.returncode == 0, trained.stderr[-3000:]
        assert "| relu |" in trained.stdout and "p-value" in trained.stdout  # the significance table, printed
    assert (runs / "digits_vgg4" / "table.md").is_file()
    for seed in range(3):  # whatever the CPU: every run completed and learned
        summary = layout.read_summary(runs / "digits_vgg4" / "relu" / f"seed_{seed}")
        assert summary["status"] == "completed" and summary["metrics"]["test_top1_at_best_val"] >= 90.0
    compared = subprocess.run(
        [
            sys.executable,
            "-m",
            "visionbench.cli",
            "compare",
            str(RECORD),
            str(runs / "digits_vgg4"),
            "--out",
            str(tmp_path / "compare.md"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert compared.returncode in (0, 1), compared.stderr[-3000:]
    verdicts = pd.read_csv(tmp_path / "compare.csv").set_index("act")["verdict"].to_dict()
    assert set(verdicts) == ACTS, verdicts
    if set(verdicts.values()) != {"identical"}:
        made_on = record_cpu()
        if cpu_model() not in made_on:
            pytest.skip(
                f"not checked: this CPU ({cpu_model()}) is not the one the record was made on "
                f"({', '.join(sorted(made_on))}), and bits are promised only there; compare said "
                f"{verdicts} (docs/reproducing.md, 'On another CPU')"
            )
    assert set(verdicts.values()) == {"identical"}, compared.stdout
    # identical runs are one observation: the rerun collected beside the record adds nothing (docs/store.md)
    from visionbench.cli import main as cli

    assert cli(["collect", str(RECORD), "--into", str(tmp_path / "s")]) == 0
    collected = subprocess.run(
        [sys.executable, "-m", "visionbench.cli", "collect", str(runs / "digits_vgg4"), "--into", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert collected.returncode == 0 and "(0 new, 12 already in the store)" in collected.stdout, collected.stdout
