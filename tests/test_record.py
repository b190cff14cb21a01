"""A results tree's record (docs/reproducing.md): `visionbench export` writes it, `visionbench report RECORD` reads it as it
reads the runs, a damaged record is refused in one line, and the packed predictions stay small and exact enough
(results/record.py, report/export.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from visionbench.cli import main as cli
from visionbench.results import layout, record
from visionbench.results.predictions import read_evidence

from .helpers import copy_tree

TABLES = ("table.md", "table.csv", "table.tex", "per_example.md")


@pytest.fixture
def tree(trained_tree, tmp_path):
    """relu and rational × 2 seeds (rational draws shapes: snapshots), copied: (recipe dir, its record)."""
    root = copy_tree(trained_tree("act=relu,rational", "seeds=2"), tmp_path / "runs")
    recipe = root / "digits_vgg4"
    out = tmp_path / "committed" / "digits_vgg4" / "record"
    assert cli(["export", str(recipe), str(out)]) == 0
    return recipe, out


@pytest.mark.plots
def test_report_of_a_record_equals_the_report_of_its_runs(tree, capsys):
    recipe, out = tree
    assert cli(["report", str(recipe), "--plots"]) == 0
    assert cli(["report", str(out), "--plots"]) == 0
    written = capsys.readouterr().err
    regenerated = out.parent  # the folder holding the record: the tree's place
    for name in TABLES:
        assert (regenerated / name).read_bytes() == (recipe / name).read_bytes(), name
    for name in ("curves_test_top1.png", "act_shapes_rational_seed0.png"):
        assert (regenerated / name).stat().st_size > 1000, name
    assert "visionbench-record-" not in written  # the paths it names are the copies', not the temporary tree's
    assert (regenerated / "per_example.csv").read_bytes() == (recipe / "per_example.csv").read_bytes()


def test_a_record_holds_every_run_whole(tree, tmp_path):
    recipe, out = tree
    root = record.materialize(out, tmp_path / "m")
    assert root.name == "digits_vgg4"
    runs = layout.find_run_dirs(recipe)
    assert [r.relative_to(recipe) for r in runs] == [r.relative_to(root) for r in layout.find_run_dirs(root)]
    for run in runs:
        again = root / run.relative_to(recipe)
        assert layout.read_summary(again) == layout.read_summary(run)
        assert layout.read_config(again) == layout.read_config(run)
        assert layout.files(again).metrics.read_text() == layout.files(run).metrics.read_text()
        (ours, meta), (theirs, meta_again) = (
            read_evidence(layout.files(run).predictions),
            read_evidence(layout.files(again).predictions),
        )
        assert meta_again == {k: v for k, v in meta.items()}
        for variant, arrays in ours.items():
            for key, value in arrays.items():
                assert np.array_equal(theirs[variant][key], value), key


def test_export_of_a_materialised_record_is_the_same_record(tree, tmp_path):
    _, out = tree
    again = tmp_path / "again"
    assert cli(["export", str(record.materialize(out, tmp_path / "m")), str(again)]) == 0
    assert (again / record.RECORD).read_text() == (out / record.RECORD).read_text()
    assert record.predictions_path(again).read_bytes() == record.predictions_path(out).read_bytes()


def test_packed_predictions_of_10000_images_are_exact_and_about_30_kB():
    rng = np.random.default_rng(0)
    n, classes = 10_000, 10
    target = rng.integers(0, classes, n)
    wrong = rng.random(n) < 0.07
    pred = np.where(wrong, (target + rng.integers(1, classes, n)) % classes, target)
    p_true = np.where(wrong, rng.beta(1, 6, n), 1 - rng.beta(0.3, 30, n)).astype(np.float32)
    confidence = np.where(wrong, np.maximum(rng.beta(5, 2, n), p_true), p_true).astype(np.float32)
    variant = {"pred": pred, "p_true": p_true, "confidence": confidence, "target": target}
    packed = record.pack(variant, classes)
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **packed)
    assert len(buffer.getvalue()) < 31_000  # ≈ 3 bytes an image: the low mantissa bytes of p(true) are noise
    back = record.unpack(packed, target, classes)
    assert np.array_equal(back["pred"], pred)
    assert all(np.array_equal(back[k], variant[k]) for k in variant)


def test_changes_are_undone_by_apply():
    base = {"a": 1, "b": {"c": [1, 2], "d": None}, "e": {}}
    d = {"a": 1.0, "b": {"c": [1, 3]}, "f": "new", "e": {}}
    assert record.apply(base, record.changes(base, d)) == d
    assert type(record.apply(base, record.changes(base, d))["a"]) is float


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda out: (out / "record.json").write_text((out / "record.json").read_text()[:500]), "truncated"),
        (
            lambda out: record.predictions_path(out).write_bytes(record.predictions_path(out).read_bytes()[:1000]),
            "truncated or edited",
        ),
        (
            lambda out: (out / "record.json").write_text(
                (out / "record.json").read_text().replace('"version": 2', '"version": 99')
            ),
            "format version 99",
        ),
        (lambda out: record.predictions_path(out).unlink(), "missing"),
    ],
)
def test_a_damaged_record_is_refused_in_one_line_and_nothing_is_written(tree, capsys, damage, says):
    _, out = tree
    damage(out)
    assert cli(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not (out.parent / "table.md").exists()


def test_export_refuses_what_it_cannot_do(tree, tmp_path, capsys):
    recipe, out = tree
    assert cli(["export", str(tmp_path / "nowhere"), str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli(["export", str(out), str(tmp_path / "x")]) == 2
    assert "is a record already" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert cli(["export", str(recipe), str(tmp_path / "full")]) == 2
    assert "is not a record" in capsys.readouterr().err
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


def test_the_record_lists_its_runs_one_per_line(tree):
    _, out = tree
    text = (out / "record.json").read_text()
    data = json.loads(text)
    assert data["format"] == record.FORMAT and data["root"] == "digits_vgg4" and len(data["runs"]) == 4
    assert sum(1 for line in text.splitlines() if line.startswith('  {"config"')) == 4


def test_a_folder_with_a_record_but_no_runs_points_to_the_record(tree, capsys):
    _, out = tree
    assert cli(["report", str(out.parent)]) == 2
    assert f"visionbench report {out}" in capsys.readouterr().err
