"""The venv `make install` made holds requirements.lock exactly, whichever installer made it (uv or pip: Makefile,
INSTALLER). scripts/compare_installs.sh builds both and diffs them (docs/layout.md#the-locked-environment)."""

import json
import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
# what a venv made by `make install` holds besides the lock, as the lock's header says: pip (from `python -m venv`,
# at that Python's bundled version; `make lock` leaves it out) and visionbench itself (editable, --no-deps).
# setuptools is not among them: torch requires it, so the lock pins it.
NOT_LOCKED = {"pip", "visionbench"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        assert m, f"requirements.lock: not a name==version pin: {line!r}"
        assert _norm(m[1]) not in pins, f"requirements.lock names {m[1]} twice"
        pins[_norm(m[1])] = m[2]
    return pins


def _site_distributions() -> list[metadata.Distribution]:
    """Every distribution in this venv's site-packages (not the checkout's visionbench.egg-info on sys.path)."""
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return list(metadata.distributions(path=paths))


def _installed() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for dist in _site_distributions():
        found.setdefault(_norm(dist.metadata["Name"]), []).append(dist.version)
    return found


def test_lock_is_pins_only_and_leaves_out_what_install_adds():
    pins = _lock_pins()
    assert len(pins) > 100
    assert not NOT_LOCKED & set(pins), "pip and visionbench stay out of the lock (Makefile: lock)"
    assert {"torch", "torchvision", "setuptools"} <= set(pins)


@pytest.mark.skipif(
    not (Path(sys.prefix) / ".installed").is_file(),
    reason="not running in a venv made by `make install` (no .installed stamp in sys.prefix)",
)
def test_venv_is_the_lock_exactly():
    pins, installed = _lock_pins(), _installed()
    twice = {name: versions for name, versions in installed.items() if len(versions) > 1}
    missing = {name: version for name, version in pins.items() if name not in installed}
    wrong = {
        name: f"{installed[name][0]} (lock: {version})"
        for name, version in pins.items()
        if name in installed and installed[name][0] != version
    }
    extra = {name: versions[0] for name, versions in installed.items() if name not in pins and name not in NOT_LOCKED}
    assert not (twice or missing or wrong or extra), (
        f"{sys.prefix} is not requirements.lock: installed twice {twice}, missing {missing}, other versions {wrong}, "
        f"not in the lock {extra}. `make clean install` rebuilds it (`make reference` adds packages outside the lock)."
    )
    assert "pip" in installed, "pip comes with the venv (python -m venv) and stays"
    assert "visionbench" in installed, "visionbench itself: `pip install --no-deps -e .` after the lock"
    (ours,) = [d for d in _site_distributions() if _norm(d.metadata["Name"]) == "visionbench"]
    direct_url = ours.read_text("direct_url.json")
    assert direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"), "visionbench: editable install"
