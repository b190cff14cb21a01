"""A run's checkpoints are data, read with `weights_only=True` (results/checkpoint.py `load`), wherever the run
directory came from (docs/reproducing.md, "Files from someone else"). A checkpoint that pickles a call is refused in one line naming the file, and the
call never runs, on all three paths that read one: `visionbench predictions RUN`, a rerun that rewrites a missing
predictions.npz, and resuming an interrupted run (our epoch read first, then Lightning's own load, which is
`weights_only=True` too). Our own checkpoints need nothing beyond torch's allow-list (`SAFE_GLOBALS` is empty).

The planted call is harmless: `open(MARKER, "w")`, which creates an empty file; the marker's absence is the proof
that nothing in the file ran (and a plain unpickling of the same file does create it: the payload is live)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from visionbench.cli import main
from visionbench.results import checkpoint, layout
from visionbench.results.io import RunStateError

from .helpers import copy_tree, shrunk, write_run


class Planted:
    """Unpickled, calls open(marker, "w"): what a pickled os.system would be, without the harm."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path: Path, marker: Path) -> Path:
    """A Lightning-looking checkpoint at `path` whose callback state pickles the call."""
    torch.save(
        {
            "epoch": 0,
            "global_step": 4,
            "pytorch-lightning_version": "2.6.6",
            "state_dict": {},
            "callbacks": {"PredictionsWriter": Planted(marker)},
        },
        path,
    )
    return path


@pytest.fixture
def run(relu_pair, tmp_path):
    """A copy of a completed relu run (seed 0) and its results tree, with the marker's path."""
    results = copy_tree(relu_pair, tmp_path / "r")
    return results, results / "digits_vgg4" / "relu" / "seed_0", tmp_path / "MARKER"


def one_line(err: str, prefix: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


def test_the_planted_payload_is_live_and_load_refuses_it(tmp_path):
    marker = tmp_path / "MARKER"
    path = plant(tmp_path / "x.ckpt", marker)
    with pytest.raises(checkpoint.UnsafeCheckpoint) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and "io.open" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(checkpoint.UnsafeCheckpoint, match="delete it to retrain this run"):
        checkpoint.checkpoint_epoch(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what the code did before: the call runs
    assert marker.exists()
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    with pytest.raises(RunStateError, match="text.ckpt is unreadable"):
        checkpoint.load(tmp_path / "text.ckpt")


def test_our_own_checkpoints_need_no_allowed_global(relu_pair):
    assert checkpoint.SAFE_GLOBALS == ()
    run = layout.files(relu_pair / "digits_vgg4" / "relu" / "seed_0")
    for path in (run.last, run.best):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == [], path
        obj = checkpoint.load(path)
        assert checkpoint.is_run_checkpoint(obj) and obj["callbacks"]
    assert checkpoint.checkpoint_epoch(run.last) == 2


@pytest.mark.parametrize("which", ["last", "best"])
def test_predictions_command_refuses_a_planted_checkpoint(run, which, capsys):
    _, run_dir, marker = run
    files = layout.files(run_dir)
    planted = plant(getattr(files, which), marker)
    files.predictions.unlink()
    assert main(["predictions", str(run_dir)]) == 2
    line = one_line(capsys.readouterr().err, "visionbench predictions: ")
    assert f"{planted} is refused, not loaded: it pickles io.open" in line, line
    assert not marker.exists() and not files.predictions.exists()


def test_a_rerun_does_not_rewrite_predictions_from_a_planted_checkpoint(run, capsys):
    results, run_dir, marker = run
    files = layout.files(run_dir)
    plant(files.last, marker)
    files.predictions.unlink()
    assert main(["run", f"results_dir={results}", *shrunk(), "act=relu", "seeds=2"]) == 0  # both completed: skipped
    notes = [ln for ln in capsys.readouterr().err.splitlines() if str(files.last) in ln]
    assert len(notes) == 1 and "is refused, not loaded: it pickles io.open" in notes[0], notes
    assert not marker.exists() and not files.predictions.exists()


def interrupted(run_dir: Path) -> None:
    path = layout.files(run_dir).summary
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": layout.INTERRUPTED}))


def test_resuming_refuses_a_planted_last_checkpoint(run, capsys):
    results, run_dir, marker = run
    files = layout.files(run_dir)
    interrupted(run_dir)
    plant(files.last, marker)
    assert main(["run", f"results_dir={results}", *shrunk(), "act=relu", "seeds=2"]) == 1  # that run failed
    err = capsys.readouterr().err
    assert f"{files.last} is refused, not loaded: it pickles io.open" in err, err
    summary = layout.read_summary(run_dir)
    assert summary["status"] == layout.FAILED and str(files.last) in summary["error"]
    assert "\n" not in summary["error"]
    assert not marker.exists()


def test_lightning_resume_loads_weights_only_too(run, monkeypatch):
    """Past our own epoch read (stubbed out here), Lightning's load is asked for weights_only=True: even with
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which turns torch's default (weights_only=None) into False."""
    from visionbench.train import run as train_run

    results, run_dir, marker = run
    interrupted(run_dir)
    plant(layout.files(run_dir).last, marker)
    monkeypatch.setattr(train_run, "checkpoint_epoch", lambda path: 1)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    assert main(["run", f"results_dir={results}", *shrunk(), "act=relu", "seeds=2"]) == 1
    assert "Weights only load failed" in layout.read_summary(run_dir)["error"]
    assert not marker.exists()


def test_predictions_without_checkpoints_is_bad_input(tmp_path, capsys):
    run_dir = write_run(tmp_path, "digits_vgg4", "relu", 0, 90.0)
    assert main(["predictions", str(run_dir)]) == 2
    one_line(capsys.readouterr().err, "visionbench predictions: ")
