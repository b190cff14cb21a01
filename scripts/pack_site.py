"""Copy installed pure-Python distributions (their packages and dist-info) into a folder that PYTHONPATH can import
from: the packages a machine without a registry lacks, carried there as they are installed here. `make gpu-carry`
packs what `visionbench bench train` needs and the lent GPUs lack (docs/bench.md, "The GPU window"):

    python scripts/pack_site.py .gpu-site hydra-core omegaconf antlr4-python3-runtime

A distribution with compiled extensions is refused: it would not load on another Python (carry a wheel built for
that machine instead: `scripts/gpu_window.py --wheels DIR`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
from pathlib import Path

COMPILED = (".so", ".pyd", ".dylib")


def pack(names: list[str], out: Path) -> list[str]:
    """Copy each distribution's files under `out` (scripts outside site-packages and bytecode left out); one line
    per distribution. Raises ValueError for a distribution that is not installed or not pure Python."""
    lines = []
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ValueError(f"{name} is not installed in {sys.prefix}") from None
        files = [
            f for f in dist.files or [] if f.parts[0] != ".." and "__pycache__" not in f.parts and f.suffix != ".pyc"
        ]
        compiled = [str(f) for f in files if f.suffix in COMPILED]
        if compiled:
            raise ValueError(f"{name} is not pure Python ({compiled[0]}): carry a wheel built for the other machine")
        for f in files:
            target = out / f
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dist.locate_file(f), target)
        lines.append(f"{name} {dist.version}: {len(files)} files")
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/pack_site.py", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the folder to fill (created; put it on PYTHONPATH there)")
    p.add_argument("names", nargs="+", help="distribution names, as pip names them")
    args = p.parse_args(argv)
    try:
        lines = pack(args.names, args.out)
    except ValueError as e:
        p.error(str(e))
    print("\n".join(lines + [f"written: {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
