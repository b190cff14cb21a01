"""visionbench: does activation X really beat ReLU/GELU in vision model M, by more than seed noise? (README.md)

The few calls a notebook needs, imported on first use (`import visionbench` loads no torch):

    import visionbench as vb
    vb.activations.names(), vb.models.names()                  # the registries (vb.activations.create("rational"))
    cfg = vb.load_config(["act=relu,rational", "seeds=2"])     # `visionbench run`'s arguments, checked
    outcomes = vb.run_sweep(cfg)                               # trains (resuming), one Outcome per run
    runs = vb.load_runs(f"{cfg.results_dir}/{cfg.recipe}")     # the report's reader: one row per run

The command line is visionbench/cli.py (its commands: docs/layout.md, "Commands").
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module below visionbench, attribute; None: the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "activations": (".activations", None),
    "models": (".models", None),
    "load_config": (".sweep.preflight", "load_config"),
    "run_sweep": (".sweep.sweep", "run_sweep"),
    "load_runs": (".report.collect", "load_runs"),
}

__all__ = ["__version__", *_LAZY]


def _version() -> str:
    """The installed distribution's version; from a source tree that is not installed, pyproject.toml's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("visionbench")
    except PackageNotFoundError:
        import re
        from pathlib import Path

        try:
            text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
        except OSError:
            return "0+unknown"
        project = text.partition("[project]")[2]
        found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.MULTILINE)
        return found.group(1) if found else "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = _version()
    elif name in _LAZY:
        module, attribute = _LAZY[name]
        value = importlib.import_module(module, __name__)
        if attribute is not None:
            value = getattr(value, attribute)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
