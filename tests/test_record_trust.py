"""A record from someone else (docs/reproducing.md, "Files from someone else"): it writes only inside the tree it materialises, reads only as it was
exported (record.json's SHA-256 of its own content, the predictions file's), is replaced in one step by export, and
whatever is wrong with it — or with what export would pack — is one line, exit 2, with nothing written; the notes
on a record's runs name the record; `compare` names the settings of factor sweeps and leaves stalled runs out
(results/record.py, report/export.py, report/compare.py). Written trees only: no training, a few seconds in all."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from visionbench.cli import main as cli
from visionbench.report.export import export
from visionbench.results import layout, record
from visionbench.results.predictions import write_predictions

from .helpers import write_run

N, C = 60, 10  # images per run, classes
TARGET = np.random.default_rng(7).integers(0, C, N)


def write_tree(root: Path, values: dict[str, list[float]], recipe: str = "digits_vgg4", setting: str = "") -> Path:
    """Runs of `recipe` (in the folder `setting` of a factor sweep when given) from `{act: [value per seed]}`, each
    with its predictions.npz: as many right predictions as its value says, epoch 3 (its best epoch), 10 classes."""
    rng = np.random.default_rng(0)
    for act, vals in values.items():
        for seed, v in enumerate(vals):
            run = write_run(root, recipe, act, seed, v)
            if setting:
                moved = root / recipe / setting / act / f"seed_{seed}"
                moved.parent.mkdir(parents=True, exist_ok=True)
                run = run.rename(moved)
            summary = layout.read_summary(run)
            summary["predictions"] = "predictions.npz"
            if setting:  # in the summary and the config, as the sweep writes them (results/integrity.py)
                summary["setting"] = dict(item.split("=") for item in setting.split(","))
                layout.write_config(run, {**layout.read_config(run), "setting": summary["setting"]})
            layout.write_summary(run, summary)
            wrong = np.zeros(N, bool)
            wrong[: round(N * (1 - v / 100))] = True
            pred = np.where(wrong, (TARGET + 1) % C, TARGET)
            p_true = np.where(wrong, rng.uniform(0.0, 0.3, N), rng.uniform(0.5, 1.0, N)).astype(np.float32)
            confidence = np.where(wrong, np.maximum(p_true, 0.6), p_true).astype(np.float32)
            write_predictions(
                layout.files(run).predictions,
                {"raw": {"pred": pred, "target": TARGET, "p_true": p_true, "confidence": confidence, "epoch": 3}},
                meta={"recipe": recipe, "act": act, "seed": seed, "n_classes": C},
            )
    return root / recipe


@pytest.fixture
def tree(tmp_path):
    """(a recipe dir of relu and gelu × 3 seeds, its record in committed/digits_vgg4/record)."""
    recipe = write_tree(tmp_path / "runs", {"relu": [98.0, 98.4, 97.9], "gelu": [98.1, 98.3, 98.6]})
    out = tmp_path / "committed" / "digits_vgg4" / "record"
    assert cli(["export", str(recipe), str(out)]) == 0
    return recipe, out


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"visionbench {command}: "), err
    assert "Traceback" not in err
    return err


def reseal(out: Path, change) -> None:
    """Change record.json and give it the hash of its new content: a record crafted by whoever wrote it."""
    data = json.loads((out / record.RECORD).read_text())
    change(data)
    data["sha256"][record.RECORD] = record.content_sha256(data)
    (out / record.RECORD).write_text(json.dumps(data))


# ---- 1. a record writes where it says, and only inside its tree -------------------------------------------------


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda r, victim: r["runs"][0].__setitem__("path", str(victim)), "it is absolute"),
        (lambda r, victim: r["runs"][0].__setitem__("path", "../../../victim/digits_vgg4/relu/seed_0"), "'..'"),
        (lambda r, victim: r.__setitem__("root", ".."), "root '..' cannot name a folder"),
        (lambda r, victim: r.__setitem__("root", "a/b"), "root 'a/b' cannot name a folder"),
        (lambda r, victim: r.__setitem__("files", {str(victim.parent / "sequential.json"): {}}), "it is absolute"),
        (lambda r, victim: r.__setitem__("files", {"digits_vgg4/../../x/sequential.json": {}}), "'..'"),
    ],
)
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_record_path_that_leaves_its_tree_is_refused_before_anything_is_written(
    tree, tmp_path, capsys, change, says, command
):
    recipe, out = tree
    victim = write_tree(tmp_path / "victim", {"relu": [90.0]}) / "relu" / "seed_0"
    reseal(out, lambda r: change(r, victim))
    before = files_under(tmp_path)
    assert cli([command, str(out)] if command == "report" else [command, str(recipe), str(out)]) == 2
    err = one_line(capsys, command)
    assert says in err and str(out / record.RECORD) in err, err
    assert files_under(tmp_path) == before  # nothing written: not the victim's files, not the report's


# ---- 1. record.json carries the SHA-256 of its own content --------------------------------------------------------


def _edit_metric(text: str) -> str:
    return text.replace('"val_top1_best"], 98.4]', '"val_top1_best"], 99.9]', 1)


def _delete_a_run(text: str) -> str:
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith('  {"config"'))
    del lines[first]
    return "".join(lines)


@pytest.mark.parametrize(
    "edit",
    [
        _edit_metric,
        _delete_a_run,
        lambda t: t.replace("relu/seed_1", "relu/seed_7"),
        lambda t: t.replace(' "version": 2,', ' "version": 2, "extra": 1,'),
    ],
)
def test_an_edited_record_is_refused_as_changed_since_export(tree, capsys, edit):
    recipe, out = tree
    text = (out / record.RECORD).read_text()
    assert edit(text) != text
    (out / record.RECORD).write_text(edit(text))
    assert cli(["report", str(out)]) == 2
    err = one_line(capsys, "report")
    assert f"{out / record.RECORD} has been changed since it was exported (sha256 " in err
    assert f"re-export it from its runs (visionbench export RUNS_DIR {out})" in err
    assert not (out.parent / "table.md").exists()
    assert cli(["compare", str(recipe), str(out)]) == 2
    assert "has been changed since it was exported" in one_line(capsys, "compare")


def test_the_layout_of_record_json_is_not_its_content(tree, capsys):
    """The hash is of the content (canonical JSON): a record re-indented by a tool still reads."""
    _, out = tree
    (out / record.RECORD).write_text(json.dumps(json.loads((out / record.RECORD).read_text()), indent=4))
    assert cli(["report", str(out)]) == 0


def _as_format_1(out: Path) -> None:
    data = json.loads((out / record.RECORD).read_text())
    blob = out / data.pop("predictions")
    data["version"], data["sha256"] = 1, {record.PREDICTIONS: data["sha256"][blob.name]}
    blob.rename(out / record.PREDICTIONS)
    (out / record.RECORD).write_text(json.dumps(data))


def test_a_format_1_record_is_refused_and_the_upgrade_script_seals_it(tree, tmp_path, capsys):
    _, out = tree
    exported = (out / record.RECORD).read_text()
    _as_format_1(out)
    assert cli(["report", str(out)]) == 2
    err = one_line(capsys, "report")
    assert "format version 1, written before a record held the SHA-256 of its own content" in err
    assert f"visionbench export RUNS_DIR {out}" in err and f"scripts/upgrade_records.py {out}" in err
    script = Path(__file__).resolve().parent.parent / "scripts" / "upgrade_records.py"
    spec = importlib.util.spec_from_file_location("upgrade_records", script)
    upgrade = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(upgrade)
    assert upgrade.main([str(out)]) == 0
    assert (out / record.RECORD).read_text() == exported  # the record export wrote, sealed again
    assert sorted(p.name for p in out.iterdir()) == sorted([record.RECORD, record.predictions_path(out).name])


# ---- 7. export replaces a record in one step ------------------------------------------------------------------------


class Killed(BaseException):
    """The process killed (SIGKILL) at this point: nothing after it runs."""


def _change_a_metric(recipe: Path) -> None:
    """A metric and the predictions of one run changed: the next record differs in both of its files."""
    run = recipe / "relu" / "seed_0"
    summary = layout.read_summary(run)
    summary["metrics"]["val_top1_final"] = 12.5
    layout.write_summary(run, summary)
    with np.load(layout.files(run).predictions) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["raw_p_true"] = arrays["raw_confidence"] = np.where(
        arrays["raw_pred"] == arrays["raw_target"], 0.75, arrays["raw_p_true"]
    ).astype(np.float32)
    arrays["raw_confidence"] = np.maximum(
        arrays["raw_confidence"], np.where(arrays["raw_pred"] == arrays["raw_target"], 0, 0.6)
    ).astype(np.float32)
    with open(layout.files(run).predictions, "wb") as f:
        np.savez(f, **arrays)


def _relu_seed_0(out: Path, tmp_path: Path) -> dict:
    return layout.read_summary(record.materialize(out, tmp_path / "m") / "relu" / "seed_0")["metrics"]


@pytest.mark.parametrize("kill_at", [1, 2])  # os.replace #1: the new predictions file; #2: record.json, the commit
def test_a_kill_before_the_commit_leaves_the_old_record_whole(tree, tmp_path, monkeypatch, capsys, kill_at):
    recipe, out = tree
    old_text, old_blob = (out / record.RECORD).read_text(), record.predictions_path(out)
    _change_a_metric(recipe)
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == kill_at:
            raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        export(recipe, out)
    monkeypatch.undo()
    assert calls[-1] == (record.RECORD if kill_at == 2 else calls[0]) and calls[0].startswith("predictions.")
    assert calls[0] != old_blob.name  # the new predictions file has a name of its own: the old one stays
    assert (out / record.RECORD).read_text() == old_text and old_blob.is_file()
    assert _relu_seed_0(out, tmp_path)["val_top1_final"] != 12.5  # the old record, read whole (hashes checked)
    assert cli(["export", str(recipe), str(out)]) == 0  # and the next export completes, leaving no stray file
    assert sorted(p.name for p in out.iterdir()) == sorted([record.RECORD, record.predictions_path(out).name])
    assert _relu_seed_0(out, tmp_path / "again")["val_top1_final"] == 12.5


def test_a_kill_after_the_commit_leaves_the_new_record_and_a_stray_file_the_next_export_removes(
    tree, tmp_path, monkeypatch
):
    recipe, out = tree
    old_blob = record.predictions_path(out)
    _change_a_metric(recipe)

    def unlink(self, missing_ok=False):
        raise Killed

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(Killed):
        export(recipe, out)
    monkeypatch.undo()
    assert old_blob.is_file() and record.predictions_path(out) != old_blob
    assert _relu_seed_0(out, tmp_path)["val_top1_final"] == 12.5  # the new record, whole
    export(recipe, out)
    assert not old_blob.exists() and len(list(out.iterdir())) == 2


def test_a_folder_left_by_a_first_export_killed_before_its_commit_is_exported_into(tree, tmp_path, monkeypatch):
    recipe, _ = tree
    out = tmp_path / "first"
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        export(recipe, out)
    monkeypatch.undo()
    assert not record.is_record(out) and len(list(out.iterdir())) == 1  # the predictions file alone
    assert cli(["export", str(recipe), str(out)]) == 0 and record.read(out)


# ---- 7. export checks what it packs; a damaged or malformed record is one line ----------------------------------


def _savez(path: Path, **arrays) -> None:
    with open(path, "wb") as f:
        np.savez(f, schema=np.int64(1), **arrays)


@pytest.mark.parametrize(
    "damage, says",
    [
        (
            lambda p: _savez(
                p,
                raw_pred=TARGET,
                raw_target=TARGET,
                raw_p_true=np.ones(N - 10, np.float32),
                raw_confidence=np.ones(N, np.float32),
                raw_epoch=np.int64(3),
            ),
            "not one entry per image",
        ),
        (
            lambda p: _savez(
                p,
                raw_pred=TARGET,
                raw_target=TARGET,
                raw_p_true=np.full(N, 0.5, np.float32),
                raw_confidence=np.full(N, 0.7, np.float32),
                raw_epoch=np.int64(3),
            ),
            "its raw_confidence would not come back exactly from the record",
        ),
        (lambda p: p.write_bytes(b"PK\x03\x04 not a zip"), "is not a readable predictions file"),
    ],
)
def test_export_refuses_predictions_it_cannot_pack_in_one_line(tree, tmp_path, capsys, damage, says):
    recipe, _ = tree
    damaged = layout.files(recipe / "gelu" / "seed_1").predictions
    damage(damaged)
    assert cli(["export", str(recipe), str(tmp_path / "new")]) == 2
    err = one_line(capsys, "export")
    assert f"{damaged} cannot go into a record: " in err and says in err, err
    assert f"rewrite it with `visionbench predictions {damaged.parent}`" in err
    assert not (tmp_path / "new").exists()


def _shorter_p_true(out: Path) -> None:
    """A predictions file whose arrays are not what record.json says, under its own hash (a crafted record)."""
    blob = record.predictions_path(out)
    with np.load(blob) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["r0_raw_p_true"] = arrays["r0_raw_p_true"][:, :-5]
    blob.unlink()
    with open(out / "new.npz", "wb") as f:
        np.savez_compressed(f, **arrays)
    digest = __import__("hashlib").sha256((out / "new.npz").read_bytes()).hexdigest()
    (out / "new.npz").rename(out / record.blob_name(digest))
    reseal(
        out,
        lambda r: (
            r.__setitem__("predictions", record.blob_name(digest)),
            r.__setitem__("sha256", {record.blob_name(digest): digest}),
        ),
    )


@pytest.mark.parametrize(
    "damage, says",
    [
        (
            lambda out: reseal(out, lambda r: r["runs"][0]["summary"].__setitem__("base", 99)),
            "is malformed: runs[0].summary names base 99, not one of the 2 bases",
        ),
        (lambda out: reseal(out, lambda r: r.__setitem__("runs", "every run")), "is malformed: runs is no list"),
        (
            lambda out: reseal(out, lambda r: r["runs"][0].__setitem__("snapshots", [{"epoch": "3", "layers": []}])),
            "runs[0].snapshots[0] has no epoch",
        ),
        (
            lambda out: reseal(out, lambda r: r["runs"][1].__setitem__("path", r["runs"][0]["path"])),
            "runs[1].path 'gelu/seed_0' repeats runs[0].path",
        ),
        (
            lambda out: reseal(
                out, lambda r: r["runs"][0]["summary"].__setitem__("set", [[["metrics"], 1], [["metrics", "x"], 2]])
            ),
            "runs[0] (gelu/seed_0) cannot be written back (TypeError",
        ),
        (
            lambda out: reseal(out, lambda r: r["runs"][0]["predictions"]["variants"]["raw"].__setitem__("target", 5)),
            "does not hold what record.json says of runs[0] (gelu/seed_0): it lacks target_5",
        ),
        (_shorter_p_true, "does not hold what record.json says of runs[0] (gelu/seed_0): its raw arrays have shapes"),
        (
            lambda out: reseal(out, lambda r: r.__setitem__("predictions", "../predictions.npz")),
            "is malformed: predictions",
        ),
        (lambda out: (out / record.RECORD).write_text("[1, 2]"), "is not a visionbench record"),
        (lambda out: (out / record.RECORD).write_text("[" * 100_000), "is not a complete JSON file"),
    ],
)
def test_a_malformed_record_is_one_line_naming_the_file(tree, capsys, damage, says):
    recipe, out = tree
    damage(out)
    assert cli(["report", str(out)]) == 2
    err = one_line(capsys, "report")
    assert says in err and str(out) in err, err
    assert not (out.parent / "table.md").exists()
    assert cli(["compare", str(recipe), str(out)]) == 2
    assert says in one_line(capsys, "compare")


# ---- 7. the notes on a record's runs name the record, not its temporary folder ----------------------------------


def test_the_notes_on_a_records_runs_name_the_record_and_how_to_fix_it(tmp_path, capsys):
    recipe = write_tree(tmp_path / "runs", {"relu": [98.0, 98.4, 97.9], "gelu": [98.1, 98.3, 98.6]})
    mismatch = recipe / "gelu" / "seed_1"  # another run's predictions (a run whose own disagree is left out whole)
    shutil.copy(layout.files(recipe / "gelu" / "seed_0").predictions, layout.files(mismatch).predictions)
    layout.files(recipe / "relu" / "seed_2").predictions.unlink()  # the summary says it wrote one: lost since
    out = tmp_path / "committed" / "digits_vgg4" / "record"
    assert cli(["export", str(recipe), str(out)]) == 0
    capsys.readouterr()
    assert cli(["report", str(out)]) == 0
    said = "\n".join(capsys.readouterr()) + "".join(p.read_text() for p in out.parent.glob("*.md"))
    assert "visionbench-record-" not in said  # the temporary folder, deleted when the report ends
    fix = f"visionbench export RUNS_DIR {out}"
    assert f"`visionbench predictions RUNS_DIR/gelu/seed_1 && {fix}`" in said
    assert f"`visionbench predictions RUNS_DIR/relu/seed_2 && {fix}`" in said


# ---- 7. compare: the settings of factor sweeps, and stalled runs -------------------------------------------------


def test_compare_of_factor_sweeps_without_a_shared_setting_names_the_settings(tmp_path, capsys):
    a = write_tree(tmp_path / "a", {"relu": [98.0, 98.4]}, setting="lr=0.1")
    b = write_tree(tmp_path / "b", {"relu": [98.0, 98.4], "gelu": [98.1, 98.2]}, setting="lr=0.2")
    assert cli(["compare", str(a), str(b)]) == 2
    err = one_line(capsys, "compare")
    assert err.endswith(
        "A and B share no activation of digits_vgg4 in one setting: A has relu at lr=0.1; B has "
        "gelu at lr=0.2, relu at lr=0.2"
    ), err


def test_compare_leaves_stalled_runs_out_of_its_scoring_and_says_so(tmp_path, capsys):
    a = write_tree(tmp_path / "a", {"relu": [98.0, 98.4, 97.9]})
    b = write_tree(tmp_path / "b", {"relu": [98.1, 97.8, 98.3, 10.0]})  # seed 3 at chance level (10 classes)
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp.md")]) == 0
    out = capsys.readouterr().out
    row = __import__("pandas").read_csv(tmp_path / "cmp.csv").iloc[0]
    assert row["n_b"] == 3 and row["mean_b"] == pytest.approx(np.mean([98.1, 97.8, 98.3]))
    assert "B: 1 stalled run (seed 3) left out of the scoring (best held-out top-1 10.00 %" in out
    assert "as diverged runs are" in out
