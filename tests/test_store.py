"""One table of every run (docs/store.md): `visionbench collect` gathers trees, records and stores into a store of
Parquet files (results/store.py); the store reports as the tree of all its runs would, the same run collected twice
is one row, a rerun with the same result is held and one with another result is another observation, rows are
checked on read, and a collect killed mid-way leaves the store whole.

    .venv/bin/python -m pytest -q tests/test_store.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from visionbench.cli import main as cli
from visionbench.results import layout, store
from visionbench.results.identity import config_hash

from .helpers import copy_tree

TABLES = ("table.md", "table.csv", "table.tex", "per_example.md", "per_example.csv")


@pytest.fixture
def pieces(trained_tree, tmp_path):
    """relu and rational × 2 seeds (the tree test_record.py uses), copied whole (`full`) and in two pieces, as if
    run on two machines, rational's seed 1 added later: `a` (relu seeds 0, 1; rational seed 0), `b` (rational
    seed 1). Returns (full, a, b), each a recipe folder digits_vgg4."""
    full = copy_tree(trained_tree("act=relu,rational", "seeds=2"), tmp_path / "full") / "digits_vgg4"
    a = Path(shutil.copytree(full, tmp_path / "machine_a" / "digits_vgg4"))
    b = Path(shutil.copytree(full, tmp_path / "machine_b" / "digits_vgg4"))
    shutil.rmtree(a / "rational" / "seed_1")
    shutil.rmtree(b / "relu")
    shutil.rmtree(b / "rational" / "seed_0")
    return full, a, b


def parts(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_pieces_collected_into_one_store_report_as_the_tree_of_all_their_runs(pieces, tmp_path, capsys):
    full, a, b = pieces
    for tree in (full, b):  # machine b is another CPU: the store's table says so, as the whole tree's does
        summary = layout.read_summary(tree / "rational" / "seed_1")
        summary["environment"]["device"]["cpu"] = "Another CPU"
        layout.write_summary(tree / "rational" / "seed_1", summary)
    s = tmp_path / "runs.store"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    assert cli(["collect", str(b), "--into", str(s)]) == 0
    out = capsys.readouterr().out
    assert f"collected 3 runs from {a} (3 new, 0 already in the store)" in out
    assert f"collected 1 runs from {b} (1 new, 0 already in the store)" in out
    assert cli(["report", str(full)]) == 0
    assert cli(["report", str(s)]) == 0
    err = capsys.readouterr().err
    for name in TABLES:
        assert (s / "_report" / "digits_vgg4" / name).read_bytes() == (full / name).read_bytes(), name
    assert "visionbench-store-" not in err  # the paths it names are the store's, not the temporary tree's
    assert "MIXED ENVIRONMENTS" in (s / "_report" / "digits_vgg4" / "table.md").read_text()
    # the table holds one row per run, with its sources and every metric
    runs = store.read(s)
    assert len(runs) == 4 and sorted(zip(runs["act"], runs["seed"])) == [
        ("rational", 0),
        ("rational", 1),
        ("relu", 0),
        ("relu", 1),
    ]
    assert set(runs["source"]) == {str(a), str(b)}
    summary = layout.read_summary(full / "relu" / "seed_0")
    row = runs[(runs["act"] == "relu") & (runs["seed"] == 0)].iloc[0]
    assert row["metric.val_top1_best"] == summary["metrics"]["val_top1_best"]
    assert row["config_hash"] == summary["config_hash"] and row["status"] == "completed"
    assert row["env.torch"] == summary["environment"]["packages"]["torch"]
    assert json.loads(row["environment"]) == summary["environment"]
    assert row["placement.parallel"] == 1 and row["seed_init"] == 0
    # and `visionbench compare` reads a store as a tree: the pieces reproduce the whole, identically
    assert cli(["compare", str(full), str(s)]) == 0
    assert "identical" in capsys.readouterr().out


def test_the_same_runs_collected_again_are_one_row_from_a_tree_a_copy_or_its_record(pieces, tmp_path, capsys):
    full, a, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0
    before = parts(s)
    assert cli(["collect", str(full), str(a), "--into", str(s)]) == 0
    assert cli(["export", str(full), str(tmp_path / "record")]) == 0
    assert cli(["collect", str(tmp_path / "record"), "--into", str(s)]) == 0
    out = capsys.readouterr().out
    assert f"collected 4 runs from {full} (0 new, 4 already in the store)" in out
    assert f"collected 3 runs from {a} (0 new, 3 already in the store)" in out
    assert f"collected 4 runs from {tmp_path / 'record'} (0 new, 4 already in the store)" in out
    assert parts(s) == before and len(store.read(s)) == 4  # nothing new: no part written
    # a store collects into another store, as the runs it holds
    assert cli(["collect", str(s), "--into", str(tmp_path / "s2")]) == 0
    assert cli(["collect", str(full), "--into", str(tmp_path / "s2")]) == 0
    out = capsys.readouterr().out
    assert f"collected 4 runs from {s} (4 new, 0 already in the store)" in out
    assert f"collected 4 runs from {full} (0 new, 4 already in the store)" in out


def _rerun(tree: Path, run: str, cpu: str, metric_shift: float = 0.0) -> None:
    """Make `tree`'s run another run of the same configuration and seed: other times and another CPU, and, with a
    `metric_shift`, another result."""
    run_dir = tree / run
    summary = layout.read_summary(run_dir)
    summary.update(started="2030-01-01T00:00:00", finished="2030-01-01T00:01:00", train_time_s=123.0)
    summary["environment"]["device"]["cpu"] = cpu
    summary["metrics"]["val_top1_best"] += metric_shift
    layout.write_summary(run_dir, summary)
    curves = pd.read_csv(layout.files(run_dir).metrics)
    curves["epoch_time_s"] = curves["epoch_time_s"] * 3 + 1  # a slower machine
    curves.to_csv(layout.files(run_dir).metrics, index=False)


def test_a_rerun_with_the_same_result_is_held_and_another_result_is_another_observation(pieces, tmp_path, capsys):
    full, a, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    other = Path(shutil.copytree(full, tmp_path / "other" / "digits_vgg4"))
    _rerun(other, "relu/seed_0", "Slow CPU")  # the same numbers, slower, elsewhere: the same observation
    _rerun(other, "relu/seed_1", "Other CPU", metric_shift=1.0)  # another result: another observation
    capsys.readouterr()
    assert cli(["collect", str(other), "--into", str(s)]) == 0
    out = capsys.readouterr().out
    assert f"from {other} (2 new, 2 already in the store; 1 of them other results of runs it holds" in out, out
    runs = store.read(s)
    assert len(runs) == 5 and len(runs[(runs["act"] == "relu") & (runs["seed"] == 1)]) == 2
    # a table holds one observation per run: the report says what the store holds and how to select
    assert cli(["report", str(s)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2 observations of digits_vgg4 relu seed 1" in err, err
    assert "'Other CPU'" in err and str(other) in err and str(a) in err and "env.device=" in err and "source=" in err
    for selector in (f"source={a}", f"source={other}"):
        assert cli(["report", str(s), selector]) == 0, capsys.readouterr().err
    table = (s / "_report" / "digits_vgg4" / "table.md").read_text()
    assert "Other CPU (relu seed 1)" in table  # the last report: the other tree's runs
    # the two observations side by side
    code = cli(["compare", str(s), str(s), "--select-a", f"source={a}", "--select-b", f"source={other}"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "digits_vgg4 relu" in out and "Other CPU" in out, out
    assert cli(["compare", str(full), str(full), "--select-a", "act=relu"]) == 2
    assert "selects the runs of a store" in capsys.readouterr().err


def test_two_configurations_of_a_recipe_are_named_with_the_keys_that_differ(pieces, tmp_path, capsys):
    full, a, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    longer = Path(shutil.copytree(full, tmp_path / "longer" / "digits_vgg4"))
    for run_dir in layout.find_run_dirs(longer):
        config = layout.read_config(run_dir)
        config["epochs"] = 99
        layout.write_config(run_dir, config)
        summary = layout.read_summary(run_dir)
        summary["config_hash"] = config_hash(config)  # as the sweep writes it
        layout.write_summary(run_dir, summary)
    assert cli(["collect", str(longer), "--into", str(s)]) == 0
    capsys.readouterr()
    assert cli(["report", str(s)]) == 2
    err = capsys.readouterr().err.strip()
    assert "2 configurations of digits_vgg4" in err and "epochs:" in err and "99" in err and "config=HASH" in err
    hashes = sorted(set(store.read(s)["config_hash"]))
    assert cli(["report", str(s), f"config={hashes[0][:6]}"]) == 0  # the start of a hash selects
    assert cli(["report", str(s), "cfg.epochs=99"]) == 0
    assert cli(["report", str(s), "cfg.epochs=7"]) == 2
    err = capsys.readouterr().err
    assert "matches cfg.epochs=7" in err and "cfg.epochs " in err and "99" in err  # what it holds


def _edit_part(s: Path, change) -> None:
    """Rewrite the store's only part with `change(frame)` applied, as a hand edit would."""
    (part,) = store.parts(s)
    frame = pd.read_parquet(part)
    change(frame)
    frame.to_parquet(part, index=False)


def test_rows_are_checked_on_read_a_changed_row_is_named_and_left_out(pieces, tmp_path, capsys):
    full, _, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0

    def change(frame):
        frame.loc[0, "metric.val_top1_best"] = 99.99  # a column
        run = json.loads(frame.loc[1, "run_json"])
        run["summary"]["metrics"]["test_top1_at_best_val"] = 99.99  # and the run inside a row, with its column
        frame.loc[1, "run_json"] = json.dumps(run)
        frame.loc[1, "metric.test_top1_at_best_val"] = 99.99
        frame.loc[2, "run_json"] = "text that is no JSON"

    _edit_part(s, change)
    runs = store.read(s)
    notes = runs.attrs["notes"]
    assert len(runs) == 1 and len(notes) == 3, notes
    assert "metric.val_top1_best: 99.99 in the row" in notes[0] and "left out" in notes[0]
    assert "has been changed since it was collected" in notes[1]
    assert "is unreadable (JSONDecodeError)" in notes[2]
    capsys.readouterr()
    assert cli(["report", str(s)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count(f"visionbench: {s}: note: ") == 3, err
    assert "| 1 |" in (s / "_report" / "digits_vgg4" / "table.md").read_text()


def test_a_runs_fix_names_the_stores_sources_never_its_temporary_tree(pieces, tmp_path):
    from visionbench.results import evidence

    full, _, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0
    with store.opened(s) as tree:
        fix = evidence.fix_command(tree / "digits_vgg4" / "relu" / "seed_0")
    assert str(tree) not in fix and str(full) in fix and "--into NEW_STORE" in fix
    assert "SOURCE/digits_vgg4/relu/seed_0" in fix
    assert evidence.fix_command("runs/x/relu/seed_0") == "visionbench predictions runs/x/relu/seed_0"


def test_bad_stores_are_refused_in_one_line_and_nothing_is_written(pieces, tmp_path, capsys):
    full, _, _ = pieces
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    other = tmp_path / "folder"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for target, says in ((a_file, "is no folder"), (other, "is no store")):
        capsys.readouterr()
        assert cli(["collect", str(full), "--into", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err
    assert a_file.read_text() == "mine" and parts(other) == ["notes.txt"]
    assert cli(["collect", str(tmp_path / "nowhere"), "--into", str(tmp_path / "s")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "s").exists()
    assert cli(["report", str(full), "act=relu"]) == 2  # a selection is a store's
    assert "no store" in capsys.readouterr().err
    assert cli(["collect", str(full), "--into", str(tmp_path / "s")]) == 0
    assert cli(["collect", str(tmp_path / "s"), "--into", str(tmp_path / "s")]) == 2  # a store into itself
    assert "is the store collected into" in capsys.readouterr().err


def test_a_damaged_tree_collects_what_is_good_and_lists_what_was_skipped(pieces, tmp_path, capsys):
    full, _, _ = pieces
    layout.files(full / "relu" / "seed_0").summary.unlink()
    layout.files(full / "rational" / "seed_1").summary.write_text('{"schema": 1, "status": ')
    record = tmp_path / "record"
    assert cli(["export", str(full), str(record)]) == 0
    text = (record / "record.json").read_text()
    (record / "record.json").write_text(text.replace('"status": "completed"', '"status": "failed"', 1))
    capsys.readouterr()
    s = tmp_path / "s"
    assert cli(["collect", str(full), str(record), "--into", str(s)]) == 2
    out, err = capsys.readouterr()
    skipped = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 3, err
    assert any("relu/seed_0: no summary.json" in line for line in skipped)
    assert any("rational/seed_1: unreadable summary.json" in line for line in skipped)
    assert any(f"{record}:" in line and "has been changed since it was exported" in line for line in skipped)
    assert f"collected 2 runs from {full} (2 new, 0 already in the store)" in out
    assert sorted(store.read(s)["act"]) == ["rational", "relu"]


def test_pandas_reads_the_store_folder_as_one_table_with_every_column(pieces, tmp_path):
    full, a, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    later = Path(shutil.copytree(full / "relu" / "seed_1", tmp_path / "later" / "digits_vgg4" / "relu" / "seed_7"))
    summary = layout.read_summary(later)
    summary["metrics"]["extra_metric"] = 1.5
    layout.write_summary(later, summary)
    (s / ".part-00000000000000001.parquet.x.tmp999999999").write_bytes(b"PAR1 torn")  # a killed collect's
    assert cli(["collect", str(later.parent.parent), "--into", str(s)]) == 0
    assert not any(p.name.startswith(".part-") for p in s.iterdir())  # its process is gone: removed
    (s / ".part-00000000000000001.parquet.x.tmp999999999").write_bytes(b"PAR1 torn")
    table = pd.read_parquet(s)
    ours = store.read(s)
    assert len(table) == len(ours) == 4
    assert "metric.extra_metric" in table.columns and "metric.val_top1_best" in table.columns
    assert sorted(table["seed"]) == sorted(ours["seed"]) == [0, 0, 1, 7]
    assert table.loc[table["seed"] == 7, "metric.extra_metric"].item() == 1.5
    query = table[table["status"] == "completed"].groupby("act")["metric.val_top1_best"].count()
    assert dict(query) == {"rational": 1, "relu": 3}
    # the configuration as columns, and the curves as a long table beside it
    config = layout.read_config(full / "relu" / "seed_0")
    assert set(table["cfg.epochs"]) == {str(config["epochs"])} and set(table["cfg.recipe"]) == {"digits_vgg4"}
    assert float(table["cfg.optim.lr"].iloc[0]) == config["optim"]["lr"]
    curves = pd.read_parquet(s / "_curves")
    seven = curves[(curves["seed"] == 7) & (curves["metric"] == "test_top1")].sort_values("epoch")
    expected = pd.read_csv(layout.files(later).metrics)
    assert list(seven["value"]) == list(expected["test_top1"]) and list(seven["epoch"]) == list(expected["epoch"])
    assert set(curves["result_sha256"]) == set(table["result_sha256"])


KILLED = """
import os, signal, sys
real = os.replace
def replace(src, dst, *a, **k):
    if os.path.basename(str(dst)).startswith("part-"):  # the part written whole, not yet renamed: kill -9
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
from visionbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_collect_killed_with_kill_9_leaves_the_store_as_it_was(pieces, tmp_path):
    full, a, b = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    before = store.read(s)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED), "collect", str(b), "--into", str(s)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == -9, done.stderr
    assert any(p.name.startswith(".part-") for p in s.iterdir())  # its temporary file, whole but never renamed
    pd.testing.assert_frame_equal(store.read(s), before)
    assert len(pd.read_parquet(s)) == 3
    assert cli(["collect", str(b), "--into", str(s)]) == 0  # the next collect cleans up and adds the run
    assert not any(p.name.startswith(".part-") for p in s.iterdir())
    assert len(store.read(s)) == 4


def test_the_selectors_of_a_store_are_taken_out_of_the_command_line():
    assert store.take_filters(["runs.store", "act=relu", "--test", "welch", "recipe=a,b", "act=gelu"]) == (
        ["runs.store", "--test", "welch"],
        {"act": ["relu", "gelu"], "recipe": ["a", "b"]},
    )
    assert store.take_filters(["runs/digits_vgg4", "--metric", "val_top1_best"]) == (
        ["runs/digits_vgg4", "--metric", "val_top1_best"],
        {},
    )
    with pytest.raises(store.StoreError, match="unknown selector"):
        store.parse_filters(["seed=1"])


def test_a_killed_readers_temporary_tree_is_removed_by_the_next_reader(pieces, tmp_path, monkeypatch):
    """A report killed while it reads a store (kill -9, SIGTERM) cannot remove its temporary tree; the next reader of
    a store or record removes the trees of processes that are gone, and leaves a live process's alone."""
    import tempfile

    full, _, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    dead = tmp_path / "tmp" / "visionbench-store-999999999-abc"  # no such process
    live = tmp_path / "tmp" / f"visionbench-store-{os.getppid()}-abc"
    for folder in (dead, live):
        (folder / "runs").mkdir(parents=True)
    with store.opened(s) as tree:
        assert tree.parent.name.startswith(f"visionbench-store-{os.getpid()}-")
    assert not dead.exists() and live.exists() and not tree.exists()


def test_a_part_is_written_in_small_row_groups_and_read_one_group_at_a_time(pieces, tmp_path, monkeypatch, capsys):
    """Reading holds one row group of runs at a time (a store of 20,000 rows: 306 MB, where one read of the whole
    table took 2.1 GB): parts are written in groups of BATCH rows, and the report's reader keeps only the small
    columns it needs of each row."""
    import pyarrow.parquet as pq

    full, _, _ = pieces
    monkeypatch.setattr(store, "BATCH", 1)
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0
    (part,) = store.parts(s)
    assert pq.ParquetFile(part).metadata.num_row_groups == 4
    light, notes = store._scan(s, keep=store.KEPT)
    assert len(light) == 4 and not notes and "run_json" not in light and "metric.val_top1_best" not in light
    monkeypatch.setattr(store, "PROGRESS", 2)  # a large store says how far the report's reading has come
    capsys.readouterr()
    assert cli(["report", str(s)]) == 0
    err = capsys.readouterr().err
    assert f"visionbench: {s}: checked 2 of 4 rows" in err and f"visionbench: {s}: wrote 4 of 4 runs as a tree" in err
    assert len(store.read(s)) == 4 and store.read(s, runs=False).columns.difference(store.read(s).columns).empty


def test_a_damaged_part_is_one_line_and_nothing_is_written(pieces, tmp_path, capsys):
    full, a, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(a), "--into", str(s)]) == 0
    (part,) = store.parts(s)
    part.write_bytes(part.read_bytes()[:200])  # a torn copy
    for command in (["report", str(s)], ["compare", str(s), str(full)], ["collect", str(full), "--into", str(s)]):
        capsys.readouterr()
        assert cli(command) == 2, command
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{part} is unreadable" in err and "Traceback" not in err, err
    assert store.parts(s) == [part] and not (s / "_report").exists()


def test_a_store_exports_as_a_record_of_its_runs(pieces, tmp_path, capsys):
    """export reads through the same door as report and compare: a store's runs become a record, whose report is the
    store's, table for table."""
    full, _, _ = pieces
    s = tmp_path / "s"
    assert cli(["collect", str(full), "--into", str(s)]) == 0
    assert cli(["export", str(s), str(tmp_path / "rec")]) == 0
    assert cli(["report", str(s)]) == 0 and cli(["report", str(tmp_path / "rec")]) == 0
    mine = (s / "_report" / "digits_vgg4" / "table.md").read_text()
    assert (tmp_path / "digits_vgg4" / "table.md").read_text() == mine
