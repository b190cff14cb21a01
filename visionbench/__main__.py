"""`python -m visionbench ...`: the `visionbench` command (cli.py) where visionbench is not installed, a checkout on
PYTHONPATH (scripts/gpu_window.py's stages: `python -m visionbench bench ...`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
