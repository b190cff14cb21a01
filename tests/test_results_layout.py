"""The results tree is owned by `visionbench.results` (docs/layout.md): one schema, one status list,
one summary reader for sweep and report; MetricsWriter's columns ('/' in a metric key)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from visionbench.report.collect import run_row
from visionbench.results import layout
from visionbench.results.io import RunStateError
from visionbench.train.callbacks import MetricsWriter

ROOT = Path(__file__).resolve().parents[1]


def _grep(pattern: str) -> list[str]:
    """`path:line:text` of each line of visionbench/**/*.py matching `pattern` (grep -E); grep failing is an error,
    not an empty answer."""
    done = subprocess.run(
        ["grep", "-rnE", pattern, "visionbench", "--include=*.py"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (0, 1), done.stderr  # 1: no line matched; 2: grep could not search
    return done.stdout.splitlines()


def test_schema_and_statuses_are_defined_once():
    assert [line.split(":")[0] for line in _grep(r"^SCHEMA *=")] == ["visionbench/results/layout.py"]
    assert [line.split(":")[0] for line in _grep(r"^(STATUSES|SCORED) *=")] == ["visionbench/results/layout.py"] * 2
    assert [line.split(":")[0] for line in _grep(r'= *"interrupted"')] == []  # a constant, not a second literal
    # a run's checkpoints are written in one place: Lightning's, through the atomic CheckpointIO
    assert [line.split(":")[0] for line in _grep(r"def _?save_checkpoint\b")] == ["visionbench/train/callbacks.py"]
    # metrics.csv is MetricsWriter's; Lightning's CSVLogger is only the opt-in tracker writing <run>/csv/
    assert {line.split(":")[0] for line in _grep(r"CSVLogger")} == {"visionbench/train/trackers.py"}


def test_models_know_neither_lightning_nor_the_run_layout():
    hits = _grep(r'pytorch-lightning_version|"ema\.module\."|config\.yaml"|"model\."')
    assert not [h for h in hits if h.startswith("visionbench/models/")], hits


# the name of every file of a run directory (layout.files), as a path literal
RUN_FILES = (
    r'"(config\.yaml|summary\.json|metrics\.csv|error\.txt|predictions\.npz|trackers\.json|last\.ckpt'
    r'|best\.ckpt)"'
)
# the literals outside visionbench/results/ that are no run file written by hand, each with why
NOT_RUN_FILES = {
    (
        "visionbench/train/trackers.py",
        'path = Path(logger.log_dir) / "metrics.csv"',
    ): "Lightning's CSVLogger's own file, in <run>/csv/ (trainer.loggers=csv)",
}


def test_the_sweep_training_and_report_reach_run_files_through_results_only():
    """A run directory's files are named, read and written by visionbench/results (layout.files, its readers and
    writers, io's atomic writes) and by no other room: none names one by a path of its own, and the atomic write
    (a temporary file renamed over the target) is results/io.py's alone. The rooms checked must exist and hold
    code, and layout.py must hold the names, so the check cannot pass by finding nothing."""
    rooms = ("results", "sweep", "train", "report")
    for room in rooms:
        assert len(list((ROOT / "visionbench" / room).glob("*.py"))) > 1, f"visionbench/{room}/ is gone: update this"
    hits = [h.split(":", 2) for h in _grep(RUN_FILES)]
    assert {path for path, _, _ in hits if path.startswith("visionbench/results/")} >= {"visionbench/results/layout.py"}
    elsewhere = [(path, text.strip()) for path, _, text in hits if not path.startswith("visionbench/results/")]
    assert [h for h in elsewhere if h not in NOT_RUN_FILES] == []
    assert {path for path, _, _ in (h.split(":", 2) for h in _grep(r"os\.replace\(|mkstemp\("))} == {
        "visionbench/results/io.py"
    }


def _summary(tmp_path, **fields) -> Path:
    run = layout.run_path(tmp_path, "r", "relu", 0)
    run.mkdir(parents=True)
    layout.write_summary(run, {"schema": layout.SCHEMA, "recipe": "r", "act": "relu", "seed": 0, **fields})
    return run


@pytest.mark.parametrize(
    "status, note",
    [(layout.RUNNING, "still running"), (layout.INTERRUPTED, "interrupted"), ("done", "unknown status 'done'")],
)
def test_report_skips_what_the_layout_does_not_score(tmp_path, status, note):
    row, why = run_row(_summary(tmp_path, status=status))
    assert row is None and note in why


def test_report_and_sweep_share_one_summary_reader(tmp_path):
    run = _summary(tmp_path, status=layout.COMPLETED, metrics={"val_top1_best": 50.0})
    row, _ = run_row(run)
    assert row["status"] == layout.COMPLETED and row["val_top1_best"] == 50.0 and row["seed"] == 0
    (run / "summary.json").write_text("[1, 2]")
    with pytest.raises(RunStateError, match="summary.json holds list"):
        layout.read_summary(run)  # the sweep's contract ...
    row, why = run_row(run)  # ... and the report's: the same reader, a note instead of an exception
    assert row is None and "summary.json holds list" in why


def test_schema_mismatch_is_named(tmp_path):
    row, why = run_row(_summary(tmp_path, status=layout.COMPLETED, schema=layout.SCHEMA + 1))
    assert row is None and f"schema {layout.SCHEMA + 1}" in why


def _trainer(metrics: dict) -> SimpleNamespace:
    opt = SimpleNamespace(param_groups=[{"lr": 0.1}])
    return SimpleNamespace(
        callback_metrics={k: torch.tensor(v) for k, v in metrics.items()},
        optimizers=[opt],
        is_global_zero=True,
        current_epoch=0,
        global_step=5,
        strategy=SimpleNamespace(reduce=lambda t, reduce_op: t),
    )


def test_metric_keys_with_a_slash_are_kept_step_values_left_out(tmp_path):
    writer = MetricsWriter(tmp_path / "metrics.csv")
    trainer = _trainer({"val_top1": 50.0, "val/acc": 0.5, "train/loss_step": 9.0, "train_loss": 1.0, "lr": 0.1})
    module = SimpleNamespace(device="cpu")
    writer.on_train_epoch_start(trainer, module)
    writer.on_train_batch_end(trainer, module, None, (torch.zeros(4, 1), torch.zeros(4)), 0)
    writer.on_train_epoch_end(trainer, module)
    assert not (tmp_path / "metrics.csv").exists()  # the module's train_loss is logged after this hook
    writer.on_save_checkpoint(trainer, module, {})
    (row,) = layout.read_metrics(tmp_path)
    assert list(row) == ["epoch", "step", "samples", "val/acc", "val_top1", "train_loss", "lr", "epoch_time_s"]
    assert (row["epoch"], row["samples"], float(row["val/acc"]), float(row["train_loss"])) == ("1", "4", 0.5, 1.0)
    writer.on_save_checkpoint(trainer, module, {})  # the epoch's second checkpoint (best, last): one row
    assert len(layout.read_metrics(tmp_path)) == 1 and not math.isnan(float(row["lr"]))


def test_run_checkpoint_format_lives_in_results(tmp_path):
    from visionbench.models.pretrained import read_checkpoint
    from visionbench.results.checkpoint import EMA_PREFIX, LIGHTNING_MARKER, MODEL_PREFIX

    run = layout.run_path(tmp_path, "r", "gelu", 0)
    layout.write_config(
        run,
        {
            "recipe": "r",
            "act": "gelu",
            "seed": 0,
            "act_options": {"gelu": {"approximate": "tanh"}},
            "model": {"name": "vgg4"},
        },
    )
    files = layout.files(run)
    files.checkpoints.mkdir()
    w = torch.ones(2)
    torch.save(
        {LIGHTNING_MARKER: "2", "epoch": 2, "state_dict": {MODEL_PREFIX + "w": w, EMA_PREFIX + "w": 2 * w}}, files.last
    )
    ckpt = read_checkpoint(files.last, ema=True)
    assert ckpt.kind == "visionbench" and torch.equal(ckpt.state_dict["w"], 2 * w)
    assert (ckpt.trained_act, ckpt.trained_act_kwargs, ckpt.trained_model) == ("gelu", {"approximate": "tanh"}, "vgg4")
    from visionbench.results.checkpoint import checkpoint_epoch

    assert checkpoint_epoch(files.last) == 3
