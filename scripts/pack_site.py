"""Copy installed pure-Python distributions (their packages and dist-info) into a folder that PYTHONPATH can import
from: the packages a machine without a registry lacks, carried there as they are installed here. `make gpu-carry`
packs what the GPU window's stages import and the lent GPUs' image lacks or holds at another version (`WINDOW`;
docs/bench.md, "The GPU window"):

    python scripts/pack_site.py .gpu-site                    # WINDOW: what scripts/gpu_window.py's stages need
    python scripts/pack_site.py /tmp/site omegaconf          # any installed pure-Python distribution

A distribution with compiled extensions is refused: it would not load on another Python (carry a wheel built for
that machine instead: `scripts/gpu_window.py --wheels DIR`). The image's own list is scripts/gpu_image_packages.txt;
tests/test_gpu_window.py checks that every distribution the stages import is on it or here, and that what is carried
here needs nothing else.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
from pathlib import Path

COMPILED = (".so", ".pyd", ".dylib")
# what the window's stages need beyond the image: the recipes' composition (`bench train`, `bench fill`, `bench sweep`:
# Hydra, absent there), and pytest for the kernel_tests stage at requirements.lock's version with the requirements it
# has there (pytest 9 needs pluggy, iniconfig, packaging, pygments; on Python >= 3.11 nothing else), and xdist with
# execnet, whose workers compile the kernel tests' kernels side by side. The image lists pytest, xdist and these four
# at unrecorded versions: carried, the stages run the ones this checkout was tested with.
WINDOW = (
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
    "pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "pygments",
    "pytest-xdist",
    "execnet",
)


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
    p.add_argument(
        "names", nargs="*", help=f"distribution names, as pip names them (default: the window's, {', '.join(WINDOW)})"
    )
    args = p.parse_args(argv)
    try:
        lines = pack(args.names or list(WINDOW), args.out)
    except ValueError as e:
        p.error(str(e))
    print("\n".join(lines + [f"written: {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
