"""A run whose files disagree with its own summary (results/integrity.py) is named as what it is and left out alone:
a damaged config.yaml is damage, not "another configuration" (the sweep fails that run and goes on, the report
leaves it out of every table, `export` refuses to seal it); a summary whose metric its own predictions contradict
(a re-sealed record, an edited file) is named as a disagreement, blaming neither, and left out of the report's
tables and verdicts and of `compare`'s."""

from __future__ import annotations

import re

import pytest

from visionbench.cli import main as cli
from visionbench.report import main as report
from visionbench.results import layout, record
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep

from .helpers import copy_tree, cut_at_line, shrunk

# lr 0.002: both runs learn in the shrink's 2 epochs (at the default lr relu stalls, and a stalled run is left out of
# the table anyway)
ARGS = ("act=relu", "seeds=2", "optim.lr=0.002")


@pytest.fixture
def learned(trained_tree):
    return trained_tree(*ARGS)


def _edit(path, key: str, value: str) -> None:
    """Replace the top-level `key:`'s value (a hand edit)."""
    text, n = re.subn(rf"(?m)^{key}: .*$", f"{key}: {value}", path.read_text())
    assert n == 1
    path.write_text(text)


DAMAGE = {
    "cut_at_a_line": (lambda f: cut_at_line(f), "config.yaml is damaged: summary.json records this run's settings"),
    "cut_in_a_line": (lambda f: cut_at_line(f, into=3), "config.yaml is"),
    "last_line_cut": (
        lambda f: f.write_bytes(b"".join(f.read_bytes().splitlines(keepends=True)[:-1])),
        "config.yaml is damaged: it has no threads (cut short?), summary.json 1",
    ),
    "act_edited": (
        lambda f: _edit(f, "act", "gelu"),
        "config.yaml is damaged: it says act 'gelu', summary.json 'relu'",
    ),
    "epochs_edited": (lambda f: _edit(f, "epochs", "7"), "config.yaml is damaged: summary.json records"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_config_is_named_and_its_run_alone_is_left_out(learned, tmp_path, capsys, damage):
    damage_it, named = DAMAGE[damage]
    root = copy_tree(learned, tmp_path / "r")
    recipe = root / "digits_vgg4"
    damage_it(recipe / "relu" / "seed_1" / "config.yaml")

    assert report([str(recipe), "--format", "md", "--no-plots"]) == 0
    table = (recipe / "table.md").read_text()
    assert "| relu | 1 |" in table, table  # the other run is still reported
    note = next(line for line in table.splitlines() if "relu/seed_1" in line)
    assert named in note and "left out of every table and verdict" in note, note
    assert "different configuration" not in note

    capsys.readouterr()
    assert cli(["export", str(recipe), str(tmp_path / "rec")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "nothing written" in err[0], err
    assert not (tmp_path / "rec").exists()

    outcomes = run_sweep(load_config([f"results_dir={root}", *shrunk(*ARGS)]), progress=False)
    assert [(o.seed, o.status) for o in outcomes] == [(0, "skipped"), (1, "failed")]
    assert named in outcomes[1].summary["error"] and "delete the run directory" in outcomes[1].summary["error"]
    assert layout.read_summary(recipe / "relu" / "seed_1")["status"] == "completed"  # nothing of it touched


def _resealed(tree, out, seed: int, metric: float) -> None:
    """The record of `tree` with run `seed`'s headline metric made up, sealed as `export` seals (record.write)."""
    rows = []
    for run_dir in layout.find_run_dirs(tree):
        row = record.read_run(run_dir)
        row["path"] = run_dir.relative_to(tree).as_posix()
        if layout.seed_of(run_dir) == seed:
            row["summary"]["metrics"]["test_top1_at_best_val"] = metric
        rows.append(row)
    record.write(out, tree.name, rows, {})


def test_a_resealed_record_whose_metric_its_predictions_contradict_is_left_out_neutrally(learned, tmp_path, capsys):
    tree = learned / "digits_vgg4"
    rec = tmp_path / "digits_vgg4" / "record"
    _resealed(tree, rec, seed=1, metric=99.5)
    assert report([str(rec), "--format", "md", "--no-plots"]) == 0
    table = (tmp_path / "digits_vgg4" / "table.md").read_text()
    assert "| relu | 1 |" in table, table
    note = next(line for line in table.splitlines() if "relu/seed_1" in line)
    assert "the summary's metrics and the predictions disagree: raw top-1 " in note, note
    assert "99.50 in summary.json (test_top1_at_best_val)" in note and "one of them was changed" in note, note
    assert "retrain it in the results tree it was exported or collected from" in note, note
    assert "visionbench predictions" not in note and "not this run's" not in note and "/tmp" not in note, note

    capsys.readouterr()
    assert cli(["compare", str(tree), str(rec)]) in (0, 1)
    out, err = capsys.readouterr()
    assert "- B: digits_vgg4/relu/seed_1: the summary's metrics and the predictions disagree" in out, out
    row = next(line for line in out.splitlines() if line.startswith("| digits_vgg4 | relu |"))
    a, b = row.split(" | ")[2:4]
    assert a.endswith("(2)") and b.endswith("(1)"), row  # B's verdict rests on its one whole run

    capsys.readouterr()  # a store takes no such run either
    assert cli(["collect", str(rec), "--into", str(tmp_path / "store")]) in (0, 2)
    said = "".join(capsys.readouterr())
    assert "relu/seed_1" in said and "disagree" in said, said
