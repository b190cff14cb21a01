"""The results tree: one module owns the on-disk layout of a run and the contract of its files.

    layout.py      run directory paths, config.yaml, summary.json (SCHEMA, statuses), metrics.csv
    checkpoint.py  the format of a run's checkpoints (Lightning markers, the module's attribute names)
    io.py          atomic writes, CSV rows, RunStateError / DiskFullError
    identity.py    what identifies a run's config: fingerprint (resume), config_hash, diff, upgrade

A leaf: it imports nothing of visionbench (identity.py takes the schema's defaults as an argument), so
models (reading a run's weights), train (writing metrics and checkpoints), sweep (writing summaries) and
report (reading them) all go through it.
"""
