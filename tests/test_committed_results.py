"""Every committed table and per_example file is regenerated from a committed record, byte for byte (issue 33).

results/regenerate.txt lists the commands (`visionbench report <record> [flags]`); each is run on a copy of its
record, and every md / csv / tex file it writes must equal the committed one. A committed table that no command
regenerates fails too: a number in the repository that cannot be regenerated is a defect. Figures are written by
the same commands (`make results`) but not compared (their bytes depend on matplotlib's version and fonts)."""
from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from visionbench.cli import main as cli

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
TEXT = (".md", ".csv", ".tex")


def commands() -> list[tuple[str, list[str]]]:
    """(record, report flags) of each line of results/regenerate.txt."""
    out = []
    for line in (RESULTS / "regenerate.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            record, *flags = shlex.split(line)
            out.append((record, flags))
    return out


def committed_tables() -> set[Path]:
    """The committed md / csv / tex files a report writes (results/bench: benchmarks, not reports)."""
    skip = {RESULTS / "README.md", RESULTS / "bench"}
    return {p for p in RESULTS.rglob("*") if p.suffix in TEXT and p.is_file() and "record" not in p.parts
            and not any(s == p or s in p.parents for s in skip)}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> tuple[Path, dict[str, set[Path]]]:
    """Every command run once on a copy of its record: (the copies' root, {record: committed paths it wrote})."""
    into = tmp_path_factory.mktemp("regenerated")
    written = {}
    for record, flags in commands():
        shutil.copytree(REPO / record, into / record)
        assert cli(["report", str(into / record), "--no-plots", *flags]) == 0, record
        written[record] = {RESULTS / p.relative_to(into / "results") for p in (into / Path(record).parent).rglob("*")
                           if p.suffix in TEXT and "record" not in p.relative_to(into).parts}
    return into, written


@pytest.mark.parametrize("record", [c[0] for c in commands()])
def test_a_committed_record_regenerates_its_tables_byte_for_byte(record, regenerated):
    into, written = regenerated
    assert written[record], f"{record}: the report wrote no table"
    for committed in sorted(written[record]):
        fresh = into / committed.relative_to(REPO)
        assert committed.is_file(), f"{committed.relative_to(REPO)} is regenerated but not committed: commit it"
        assert fresh.read_bytes() == committed.read_bytes(), (
            f"{committed.relative_to(REPO)} differs from what `visionbench report {record}` writes: regenerate it "
            "(make results) and commit the result")


def test_every_committed_table_has_a_record_that_regenerates_it(regenerated):
    made = set().union(*regenerated[1].values())
    orphans = sorted(str(p.relative_to(REPO)) for p in committed_tables() - made)
    assert not orphans, f"committed tables no record regenerates: {orphans}"
