"""Plugins: activations and models from the user's own modules, without editing visionbench (docs/your_activation.md).

    visionbench run imports=my_acts act=relu,my_act seeds=3     # my_acts.py in the current directory or on sys.path
    pip install -e examples/my_activation                       # an entry point in group `visionbench.plugins`: always loaded

A plugin module registers activations with `visionbench.activations.register` (subclassing `LearnableActivation`
for a learnable one) and models with timm's `register_model`; importing it is all `load` does. Two doors call it:
the command line, for the commands that take `imports=` beside their own flags (list, check, bench: cli.py's command
table), and `load_for(config)`, for a config's `imports` key, wherever a config is loaded (sweep/preflight.py
`load_config`: run, estimate, bench's config, the Hydra app and its jobs, every DDP rank) and in each run's process
(sweep/sweep.py: parallel=K workers). `snapshot`/`restore` (or `preserved()`) put the registries back.
Each run records the plugin that owns its activation or model (module, version, sha256 of its source: `record`),
so a changed plugin never resumes or pools silently with runs of the old one. The sha256 covers the plugin's own
file (or package) and its helpers: every module it brings in from outside the installed packages, the standard
library and visionbench (`helpers`: the modules first imported while it was imported, and those its names come
from), so an edited helper module is a new version of the plugin too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import os
import site
import sys
import sysconfig
import types
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .config import ConfigError

GROUP = "visionbench.plugins"  # the entry-point group an installed package declares its plugin module in


class PluginError(ConfigError):
    """A plugin module that cannot be used; the message is one line naming the module and why."""


class PluginWarning(UserWarning):
    """A plugin module that can be used but looks wrong (it registers nothing); the command line prints it as one
    `warning: ...` line."""


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
    helpers: dict[str, str] = field(default_factory=dict)  # module name -> file of each helper in its sha256

    def provenance(self) -> dict:
        """What a run records of it (config.yaml's `plugins`): the file's path is left out (it moves); the names of
        the helper modules its sha256 covers, when it has any."""
        record = {"module": self.module, "version": self.version, "sha256": self.sha256}
        if self.helpers:
            record["helpers"] = sorted(self.helpers)
        return record


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
        sys.path.append(cwd)  # sys.path[0] is its bin folder, not the working directory)
    global _ENTRY_POINTS_DONE
    if entry_points and not _ENTRY_POINTS_DONE:
        _ENTRY_POINTS_DONE = True
        for ep in importlib.metadata.entry_points(group=GROUP):
            dist = getattr(ep, "dist", None)
            where = f"entry point {ep.name!r} of {dist.name if dist else 'an installed package'} (group {GROUP})"
            _import(ep.module, where, dist.version if dist else None)
    return [_import(name, f"imports={name}") for name in names(imports)]


def load_for(config: Mapping[str, Any]) -> list[Plugin]:
    """`load` of a config's `imports` key: a sweep's config (sweep/preflight.py) or one run's plain config in the
    process that trains it (sweep/sweep.py: a parallel=K worker, a Hydra or submitit job)."""
    return load(config.get("imports"))


def _registries() -> tuple[dict, dict]:
    """(activation name -> class, timm model name -> entrypoint): what a plugin's import is compared against."""
    import timm

    from .activations import registry

    acts = {name: registry.get_class(name) for name in registry.names()}
    return acts, {name: timm.models.model_entrypoint(name) for name in timm.list_models()}


# timm has no public way to unregister a model: these are the tables its `register_model` writes (timm 1.0,
# timm/models/_registry.py), saved and put back by `snapshot`/`restore` only; nothing else reads them.
_TIMM_TABLES = (
    "_model_entrypoints",
    "_model_to_module",
    "_module_to_models",
    "_model_has_pretrained",
    "_model_default_cfgs",
    "_model_pretrained_cfgs",
    "_model_with_tags",
    "_deprecated_models",
    "_module_to_deprecated_models",
)


def _timm_tables(saved: dict | None = None) -> dict:
    """A copy of timm's model registry tables; with `saved` (such a copy), put them back first."""
    from timm.models import _registry as timm_registry

    def copy(table):  # one level deeper for the set/list values (module -> its models)
        out = table.copy()
        if isinstance(out, dict):
            out.update({k: v.copy() for k, v in out.items() if isinstance(v, (set, list, dict))})
        return out

    for name, table in (saved or {}).items():
        live = getattr(timm_registry, name)
        live.clear()
        live.update(copy(table))
    return {name: copy(getattr(timm_registry, name)) for name in _TIMM_TABLES if hasattr(timm_registry, name)}


@dataclass(frozen=True)
class State:
    """What loading plugins changes, as `snapshot` saw it."""

    registry: tuple[dict, dict]
    loaded: dict[str, Plugin]
    entry_points_done: bool
    timm: dict


def snapshot() -> State:
    """The loaded plugins, the activation registry and timm's model registry, for `restore`: what a test (or a
    notebook trying a plugin) puts back afterwards. sys.modules and sys.path are the caller's."""
    from .activations import registry

    return State(registry.snapshot(), dict(_LOADED), _ENTRY_POINTS_DONE, _timm_tables())


def restore(state: State) -> None:
    """Put back what `snapshot` saw: the plugins loaded since are forgotten (a later `load` imports them afresh
    once their modules leave sys.modules), their activations and models unregistered."""
    global _ENTRY_POINTS_DONE
    from .activations import registry

    registry.restore(state.registry)
    _LOADED.clear()
    _LOADED.update(state.loaded)
    _ENTRY_POINTS_DONE = state.entry_points_done
    _timm_tables(state.timm)


@contextlib.contextmanager
def preserved() -> Iterator[State]:
    """`with plugins.preserved():` the plugins loaded inside, and what they registered, are forgotten on leaving."""
    state = snapshot()
    try:
        yield state
    finally:
        restore(state)


def _module_name_hint(name: str) -> str | None:
    """For an `imports=` value that is a file path or a relative name (`./p_ok.py`, `plugins/p_ok.py`, `.p_ok`,
    `/abs/p_ok.py`), what to give instead (`imports=p_ok`, `imports=plugins.p_ok`, `imports=p_ok with
    PYTHONPATH=/abs`); None for a module name."""
    if not (name.endswith(".py") or "/" in name or os.sep in name or name.startswith(".")):
        return None
    stem = name[:-3] if name.endswith(".py") else name
    path = Path(stem)
    parts = [p for p in path.parts if p not in (".", "")]
    if path.is_absolute() or ".." in parts:
        real = Path(os.path.abspath(stem))
        return f"imports={real.name} with PYTHONPATH={real.parent} (the folder that holds it)"
    module = ".".join(parts).lstrip(".")
    return f"imports={module} (a module in the current directory or on PYTHONPATH)" if module else None


def _import(name: str, where: str, version: str | None = None) -> Plugin:
    if name in _LOADED:
        return _LOADED[name]
    hint = _module_name_hint(name)
    if hint:
        raise PluginError(
            f"{where}: {name!r} is a file path or a relative name, not a module name; give the module's name: {hint}",
            "imports",
        )
    acts_before, models_before = _registries()
    modules_before = set(sys.modules)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(name)
    except SystemExit as e:  # sys.exit() or exit() at its top level: not visionbench's exit, and no silent one
        raise PluginError(
            f"{where}: plugin module {name!r} called sys.exit({e.code!r}) while being imported; a "
            f"plugin module must only define and register (no exit at import time)",
            "imports",
        ) from None
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise PluginError(
                f"{where}: no module named {name!r} in the current directory or on sys.path "
                f"(PYTHONPATH); give an importable module name, e.g. imports=my_acts for ./my_acts.py",
                "imports",
            ) from None
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
        raise PluginError(
            f"{where}: plugin module {name!r} registers model {clash[0]!r}, which {old} already "
            f"registers; give it another name",
            "imports",
        )
    file = getattr(module, "__file__", None)
    found = helpers(module, set(sys.modules) - modules_before)
    plugin = Plugin(
        name,
        where,
        file,
        _digest(file, found),
        version or _version(module),
        sorted(a for a in acts_after if a not in acts_before or _owned(acts_after[a], name)),
        sorted(m for m in models_after if m not in models_before or _owned(models_after[m], name)),
        found,
    )
    _LOADED[name] = plugin
    if not plugin.activations and not plugin.models:
        warnings.warn(
            f"plugin module {name!r} ({where}) registered no activation and no model "
            "(visionbench.activations.register, timm's register_model)",
            PluginWarning,
            stacklevel=2,
        )
    return plugin


def _owned(obj, module: str) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    return mod == module or mod.startswith(module + ".")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if isinstance(e, ValueError) and "already registered" in text:  # the registry's own line names both modules
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _own_files(file: str | None) -> list[Path]:
    """The plugin's own source files: its file, or every .py file of its package."""
    if not file:
        return []
    path = Path(file)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    return [f for f in files if "__pycache__" not in f.parts]


def _digest(file: str | None, helpers: dict[str, str] | None = None) -> str | None:
    """sha256 of the module's source: its file, or every .py file of its package (relative paths included); with
    `helpers` (module name -> file), the sha256 of that and of each helper's name and content. Without helpers it is
    the plain source digest, as recorded before helpers were counted."""
    if not file:
        return None
    path = Path(file)
    h = hashlib.sha256()
    for f in _own_files(file):
        h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    if not helpers:
        return h.hexdigest()
    combined = hashlib.sha256(b"plugin+helpers\0" + h.hexdigest().encode() + b"\0")
    for mod, helper in sorted(helpers.items()):
        try:
            content = Path(helper).read_bytes()
        except OSError:  # deleted since it was imported: what runs is what was read
            content = b"<unreadable>"
        combined.update(mod.encode() + b"\0" + hashlib.sha256(content).hexdigest().encode() + b"\0")
    return combined.hexdigest()


@lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """The folders whose modules are not a plugin's helpers: the standard library, site-packages (the
    environment's and the user's) and visionbench itself."""
    paths = sysconfig.get_paths()
    roots = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        roots += site.getsitepackages()
    except AttributeError:  # a virtualenv's old site.py
        pass
    roots += [site.getusersitepackages(), str(Path(__file__).resolve().parent)]
    return tuple(sorted({os.path.realpath(r) for r in roots if r}))


def _local_file(module: types.ModuleType) -> str | None:
    """The real path of `module`'s file when it is a helper candidate, a file outside `_installed_roots`; else None
    (built-in, frozen, namespace, installed, visionbench's own)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not os.path.isfile(file):
        return None
    real = os.path.realpath(file)
    if any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in _installed_roots()):
        return None
    return real


def _referenced(module: types.ModuleType) -> set[str]:
    """The names of the modules `module`'s globals are or come from (`import h`, `from h import f`)."""
    out = set()
    for value in list(vars(module).values()):
        if isinstance(value, types.ModuleType):
            out.add(value.__name__)
            continue
        try:
            owner = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType)) else None
        except Exception:  # noqa: BLE001 - a lazy object's attribute: not a helper
            owner = None
        if isinstance(owner, str):
            out.add(owner)
    return out


def helpers(module: types.ModuleType, new: set[str] = frozenset()) -> dict[str, str]:
    """{module name: file} of the plugin `module`'s helpers: of the modules first imported while it was imported
    (`new`) and those its globals come from, followed through the helpers' own globals, the ones whose file is
    outside the installed packages, the standard library and visionbench (`_local_file`), less the plugin's own
    files (its `_digest` covers them). A module imported only later, inside a function, is not seen."""
    own = {os.path.realpath(f) for f in _own_files(getattr(module, "__file__", None))}
    found: dict[str, str] = {}
    queue, seen = [*sorted(new), *sorted(_referenced(module))], {module.__name__}
    while queue:
        name = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        mod = sys.modules.get(name)
        if not isinstance(mod, types.ModuleType):
            continue
        real = _local_file(mod)
        if real is None:
            continue
        if real not in own:
            found[name] = real
        queue += sorted(_referenced(mod) - seen)
    return found


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
