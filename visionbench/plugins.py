"""Plugins: activations and models from the user's own modules, without editing visionbench (docs/your_activation.md).

    visionbench run imports=my_acts act=relu,my_act seeds=3     # my_acts.py in the current directory or on sys.path
    pip install -e examples/my_activation                       # an entry point in group `visionbench.plugins`: always loaded

A plugin module registers activations with `visionbench.activations.register` (subclassing `LearnableActivation`
for a learnable one) and models with timm's `register_model`; importing it is all `load` does. It is called
wherever a config is loaded (sweep/preflight.py `load_config`: run, estimate, check, bench, the Hydra app and its
jobs, every DDP rank), in each run's process (sweep/sweep.py: parallel=K workers) and by `visionbench list`.
Each run records the plugin that owns its activation or model (module, version, sha256 of its source: `record`),
so a changed plugin file never resumes or pools silently with runs of the old one.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .config import ConfigError

GROUP = "visionbench.plugins"  # the entry-point group an installed package declares its plugin module in


class PluginError(ConfigError):
    """A plugin module that cannot be used; the message is one line naming the module and why."""


@dataclass
class Plugin:
    """One loaded plugin module and what it registered."""

    module: str
    source: str  # "imports=" or "entry point NAME of DIST"
    file: str | None
    sha256: str | None
    version: str | None
    activations: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)

    def provenance(self) -> dict:
        """What a run records of it (config.yaml's `plugins`): the file's path is left out (it moves)."""
        return {"module": self.module, "version": self.version, "sha256": self.sha256}


_LOADED: dict[str, Plugin] = {}  # module name -> its record, in load order
_ENTRY_POINTS_DONE = False


def loaded() -> list[Plugin]:
    return list(_LOADED.values())


def names(imports) -> list[str]:
    """The module names of an `imports` value: a name, a comma-separated string or a list of names."""
    items = [imports] if isinstance(imports, str) else list(imports or [])
    return [n.strip() for item in items for n in str(item).split(",") if n.strip()]


def load(imports: Iterable[str] | str | None = (), entry_points: bool = True) -> list[Plugin]:
    """Import the installed entry points of group `visionbench.plugins` (once per process) and the modules of
    `imports` (each once); the plugins named by `imports`. The current directory is importable. Raises
    PluginError (one line) for a module that is unknown, fails to import or takes a built-in's name; warns
    for an `imports=` module that registers nothing."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # a researcher's my_acts.py beside them (the console script's
        sys.path.append(cwd)                          # sys.path[0] is its bin folder, not the working directory)
    global _ENTRY_POINTS_DONE
    if entry_points and not _ENTRY_POINTS_DONE:
        _ENTRY_POINTS_DONE = True
        for ep in importlib.metadata.entry_points(group=GROUP):
            dist = getattr(ep, "dist", None)
            where = f"entry point {ep.name!r} of {dist.name if dist else 'an installed package'} (group {GROUP})"
            _import(ep.module, where, dist.version if dist else None)
    return [_import(name, f"imports={name}") for name in names(imports)]


def _registries() -> tuple[dict, dict]:
    from .activations import registry
    from timm.models import _registry as timm_registry

    return dict(registry._REGISTRY), dict(getattr(timm_registry, "_model_entrypoints", {}))


def _import(name: str, where: str, version: str | None = None) -> Plugin:
    if name in _LOADED:
        return _LOADED[name]
    acts_before, models_before = _registries()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise PluginError(f"{where}: no module named {name!r} in the current directory or on sys.path "
                              f"(PYTHONPATH); give an importable module name, e.g. imports=my_acts for ./my_acts.py",
                              "imports") from None
        raise PluginError(f"{where}: plugin module {name!r} failed to import: {_one_line(e)}", "imports") from None
    except ValueError as e:
        what = "is refused" if "already registered" in str(e) else "failed to import"  # the registry names both modules
        raise PluginError(f"{where}: plugin module {name!r} {what}: {_one_line(e)}", "imports") from None
    except Exception as e:  # noqa: BLE001 - anything the user's module raises is theirs to fix: one line
        raise PluginError(f"{where}: plugin module {name!r} failed to import: {_one_line(e)}", "imports") from None
    for w in caught:  # re-issue what the module warned, but for the collision refused below
        if "Overwriting" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    acts_after, models_after = _registries()
    clash = [m for m in models_before if models_after.get(m) is not models_before[m]]
    if clash:
        old = models_before[clash[0]].__module__
        raise PluginError(f"{where}: plugin module {name!r} registers model {clash[0]!r}, which {old} already "
                          f"registers; give it another name", "imports")
    file = getattr(module, "__file__", None)
    plugin = Plugin(name, where, file, _digest(file), version or _version(module),
                    sorted(a for a in acts_after if a not in acts_before or _owned(acts_after[a], name)),
                    sorted(m for m in models_after if m not in models_before or _owned(models_after[m], name)))
    _LOADED[name] = plugin
    if not plugin.activations and not plugin.models:
        print(f"warning: plugin module {name!r} ({where}) registered no activation and no model "
              "(visionbench.activations.register, timm's register_model)", file=sys.stderr)
    return plugin


def _owned(obj, module: str) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    return mod == module or mod.startswith(module + ".")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if isinstance(e, ValueError) and "already registered" in text:  # the registry's own line names both modules
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _digest(file: str | None) -> str | None:
    """sha256 of the module's source: its file, or every .py file of its package (relative paths included)."""
    if not file:
        return None
    path = Path(file)
    h = hashlib.sha256()
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    for f in files:
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _version(module) -> str | None:
    """The installed distribution's version of the module's top-level package, else its `__version__`."""
    top = module.__name__.split(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    v = getattr(module, "__version__", None)
    return str(v) if v is not None else None


def owner(act: str | None = None, model: str | None = None) -> list[Plugin]:
    """The loaded plugins that registered activation `act` (a registry name) or model `model`."""
    return [p for p in _LOADED.values() if act in p.activations or (model is not None and model in p.models)]


def record(run: dict) -> dict:
    """`run` (a run's plain config) with `plugins`: the provenance of the plugins that own its activation or
    model, when any does (a built-in run's config is unchanged)."""
    found = owner(run.get("act"), (run.get("model") or {}).get("name"))
    if found:
        run["plugins"] = [p.provenance() for p in found]
    return run


def split_imports(args: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the values of the `imports=` command-line arguments, the other arguments), for the commands that
    take `imports=` beside their own flags (list, bench)."""
    imports, rest = [], []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "imports":
            imports.append(value)
        else:
            rest.append(arg)
    return imports, rest
