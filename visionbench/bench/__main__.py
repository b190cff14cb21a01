"""`python -m visionbench.bench <benchmark> ...`: `visionbench bench` where visionbench is not installed (a source
checkout on PYTHONPATH: scripts/gpu_window.py). Unlike the `visionbench` command it loads no plugins, so the
activation benchmarks import no config layer (Hydra); `train` still needs it."""

import sys

from . import main

raise SystemExit(main(sys.argv[1:]))
