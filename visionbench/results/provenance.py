"""Where the sweep puts a run, and the provenance it records (package versions, git commit).

The layout of a run directory and the contract of its files (summary schema, statuses, config.yaml,
metrics.csv) are `visionbench.results.layout`'s; this module only adds the sweep's factor-sweep
level (the factor axes of visionbench/config/):

    runs/<recipe>/<act>/seed_<k>/...
    runs/<recipe>/<setting>/<act>/seed_<k>/...       # factor sweeps: one level per setting
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

from .layout import run_path
from .safe_paths import UnsafePath, component
from .settings import setting_label


def run_dir(results_dir: str | Path, recipe: str, act: str, seed: int, setting: dict | None = None) -> Path:
    """`<results_dir>/<recipe>/[<setting>/]<act label>/seed_<k>`; the setting level only in factor sweeps.

    Each level must be one plain folder name (safe_paths.component): an activation label, recipe or setting holding a
    '/', a '..', a backslash or a NUL (`act=gelu[approximate=../../x]`, a plugin's string option) is refused with
    `UnsafePath` — the sweep says so in one line before any run starts — instead of leaving `results_dir`."""
    label = setting_label(setting) if setting else None
    for what, name in (
        ("recipe", recipe),
        ("factor setting", label),
        ("activation label", act),
        ("seed folder", f"seed_{seed}"),
    ):
        if name is not None:
            _folder(str(name), what)
    return run_path(results_dir, recipe, act, seed, label)


def _folder(name: str, what: str) -> str:
    """`name` when it can be a run folder's level; UnsafePath (one line, what to do) otherwise."""
    try:
        return component(name, what)
    except UnsafePath as e:
        why = f"{what} {name!r} cannot name a folder: it holds a '/'" if "/" in name else str(e)
        fix = (
            " (an option value that is a path cannot be part of a run's folder name)" if what.startswith("act") else ""
        )
        raise UnsafePath(f"{why}{fix}; refused before any run, nothing written") from None


# the packages whose versions decide a run's numbers (summary.json `versions` and `environment.packages`)
PACKAGES = (
    "torch",
    "torchvision",
    "timm",
    "lightning",
    "torchmetrics",
    "numpy",
    "scipy",
    "scikit-learn",
    "visionbench",
)


def package_versions() -> dict[str, str | None]:
    """Each of `PACKAGES` with its installed version (None: not installed)."""
    out: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def versions(packages: dict[str, str | None] | None = None) -> dict[str, str]:
    """Python's and the installed packages' versions (summary.json `versions`; a missing package is left out);
    from `packages` (`package_versions()`) when given."""
    found = package_versions() if packages is None else packages
    return {"python": platform.python_version(), **{p: v for p, v in found.items() if v is not None}}


def git_commit() -> str | None:
    """The commit of the visionbench checkout that ran, with '+dirty' for local edits; None if not a checkout."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return sha.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None
