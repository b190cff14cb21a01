"""`visionbench collect TREE_OR_RECORD... --into STORE`: one table of every run (results/store.py, docs/store.md).

    visionbench collect runs/digits_vgg4 --into runs.store                 # a tree
    visionbench collect machine2/digits_vgg4 results/digits_vgg4/record --into runs.store   # more: trees, records
    visionbench report runs.store act=relu,rational                       # its report, into runs.store/_report/

One line per source: `collected N runs from X (M new, K already in the store)`; one line per run skipped (a run
folder without summary.json, unreadable JSON, a record whose hash does not match) and per run left out (still
running, interrupted). The exit status: 0; 2 when a run was skipped (the rest is collected), or after one line for
bad input, with nothing written: STORE a file or a folder of another kind, a source that does not exist or holds
no run, runs that conflict with the store's (the same identity, another result).
"""

from __future__ import annotations

import sys

from ..results import sources, store
from .arguments import parser
from .errors import fail, os_reason


def main(argv: list[str] | None = None) -> int:
    p = parser(
        "collect",
        "Collect the runs of results trees, records and stores into one store (a folder of Parquet files, one row per "
        "run; docs/store.md). `visionbench report STORE` reports it.",
    )
    p.add_argument("sources", nargs="+", metavar="TREE_OR_RECORD", help="results trees, records or stores")
    p.add_argument("--into", required=True, metavar="STORE", help="the store (created when missing)")
    args = p.parse_args(argv)
    try:
        lines, skipped, left, written = sources.collect(args.sources, args.into)
    except store.StoreError as e:
        return fail("collect", e)
    except OSError as e:
        return fail("collect", os_reason(e, args.into))
    for line in left:
        print(f"note: {line}; not collected", file=sys.stderr)
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    for line in lines:
        print(line)
    if written is not None:
        print(f"wrote {written}", file=sys.stderr)
    return 2 if skipped else 0
