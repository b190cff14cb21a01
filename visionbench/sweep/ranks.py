"""Which DDP rank this process is, known before Lightning sets up its process group.

Under DDP every rank runs the same `visionbench run` command (Lightning's subprocess launcher
re-runs it with `LOCAL_RANK=1, 2, ...`; torchrun and SLURM set `RANK`/`SLURM_PROCID`) and trains
the same runs together. Every rank takes part in training (its collectives), but only rank 0
speaks for the job: progress lines, config.yaml, summary.json, error.txt, the end-of-sweep report
(Lightning's own `rank_zero_only` does the same for its logs; metrics.csv and checkpoints are
already written by the global-zero process only).
"""

from __future__ import annotations

import os

# where launchers put the process's global rank, in Lightning's order (rank_zero_only's `_get_rank`)
RANK_ENV = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def process_rank() -> int:
    """This process's rank in a DDP job as its launcher set it (0 outside one)."""
    for key in RANK_ENV:
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def is_rank_zero() -> bool:
    """True in the process that writes and prints for the job (every process outside DDP).

    `LOCAL_RANK` is the rank within a node: with Lightning's launcher on several nodes the
    local rank 0 of node `NODE_RANK` > 0 is not the job's rank 0 (torchrun and SLURM set the global
    `RANK` or `SLURM_PROCID`)."""
    node = os.environ.get("NODE_RANK", "")
    return process_rank() == 0 and not (node.isdigit() and int(node) > 0)
