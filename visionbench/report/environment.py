"""The environment of a table's runs (summary.json `environment`, recorded by visionbench/train/environment.py):
the footer that names it under every table, the keys on which the runs of one table differ, and those on which two
trees' runs differ (`visionbench compare`).

    >>> from visionbench.report.environment import differences_between, environment_footer, mixed_environments
    >>> environment_footer(runs)
    'Environment: python 3.11.7 · torch 2.14.1 · ... · CPU AMD EPYC, AVX512 kernels, 2 threads · data sha256 1a…'
    >>> mixed_environments(runs)
    ['timm: 1.0.31 (relu seeds 0, 1), 1.0.32 (gelu seeds 0, 1)']
    >>> differences_between(runs_a, runs_b)
    ['timm: A 1.0.31, B 1.0.32']

`runs` is the report's runs frame (collect.py): its `environment` column holds each run's environment as canonical
JSON, None for a run that records none. All look at the runs a table's numbers come from (completed and diverged).
A key a run does not record (older runs record only their versions, git commit and threads; a run that did not
complete has no data digest) is unknown, never a difference.
"""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd

from ..results import provenance
from ..results.layout import COMPLETED, DIVERGED, STALLED

TRAINED = (COMPLETED, STALLED, DIVERGED)  # runs that trained (a stall ran to its end)
# where a run trained among others (environment `placement`, sweep/placement.py): named in the footer, never a
# difference (a seed gives the same bits alone or among K: docs/running.md#parallel-many-runs-per-device)
PLACEMENT = ("parallel", "workers", "visible_gpu", "mps")
# not compared: code changes are the config hash's business (a changed recipe) or the user's (a fix); the
# '+dirty' flag is part of the commit
IGNORED = ("git_commit", "visionbench", *PLACEMENT)
PACKAGES = tuple(p for p in provenance.PACKAGES if p != "visionbench")  # the footer names visionbench with its commit


def leaves(env: dict) -> dict:
    """The environment by its leaves' own names: python, torch, ..., cpu, cpu_capability, gpu, cuda, threads,
    deterministic_algorithms, MKL_CBWR, ..., git_commit, and data (the digest's sha256, else the digest as JSON)."""
    out = {}
    for key, value in env.items():
        if key == "data" and isinstance(value, dict):
            out[key] = value.get("sha256") or json.dumps(value, sort_keys=True)
        elif isinstance(value, dict):
            out.update(value)
        else:
            out[key] = value
    return out


def _recorded(runs: pd.DataFrame) -> list[tuple[tuple[str, int], dict]]:
    """((act, seed), environment) of the scored runs that record one, in the frame's order."""
    if "environment" not in runs:
        return []
    scored = runs[runs["status"].isin(TRAINED) & runs["environment"].notna()]
    return [((str(r["act"]), int(r["seed"])), json.loads(r["environment"])) for _, r in scored.iterrows()]


def _who(runs: list[tuple[str, int]]) -> str:
    """`relu seeds 0, 1; gelu seed 2`."""
    seeds: dict[str, list[int]] = {}
    for act, seed in runs:
        seeds.setdefault(act, []).append(seed)
    return "; ".join(
        f"{act} seed{'s' if len(s) > 1 else ''} {', '.join(map(str, sorted(s)))}" for act, s in sorted(seeds.items())
    )


def shown(value) -> str:
    """A value as the notes print it: a sha256 by its first 12 digits, None as `none`."""
    if value is None:
        return "none"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def _split(recorded: list[tuple[tuple[str, int], dict]]) -> dict[str, dict[str, list]]:
    """{key: {value: [runs]}} of the compared keys (not `IGNORED`) that hold more than one value among the runs
    recording them."""
    flat = [(who, leaves(env)) for who, env in recorded]
    out = {}
    for key in sorted({k for _, env in flat for k in env} - set(IGNORED), key=lambda k: (k.lower(), k)):
        values: dict[str, list] = {}
        for who, env in flat:
            if key in env:
                values.setdefault(shown(env[key]), []).append(who)
        if len(values) > 1:
            out[key] = dict(sorted(values.items()))
    return out


def mixed_environments(runs: pd.DataFrame) -> list[str]:
    """One line per key whose value differs between the runs of one table, naming which runs have which value:
    `timm: 1.0.31 (relu seeds 0, 1), 1.0.32 (gelu seeds 0, 1)`. Compared: python, every package version, the CPU
    model and the instruction set of its kernels, GPU, CUDA and cuDNN, threads, the determinism switches, the
    environment variables that choose kernels and threads, and the data digest. Not compared: the git commit
    (with its `+dirty` flag) and the visionbench version: a code change that changes a run's configuration shows
    in its config hash (a NOT COMPARABLE table), any other is the user's to judge."""
    return [
        f"{key}: " + ", ".join(f"{v} ({_who(w)})" for v, w in values.items())
        for key, values in _split(_recorded(runs)).items()
    ]


def differences_between(ra: pd.DataFrame, rb: pd.DataFrame) -> list[str]:
    """`key: A x, B y` per environment key whose values differ between A's runs `ra` and B's `rb` (several values
    of one tree joined by ` / `): what `visionbench compare` lists. The keys are `leaves` of collect.py's
    `environment` column (python, packages, CPU and its kernels, GPU, threads, determinism, kernel variables, data
    digest; for runs without an `environment`, their `versions` and threads); as in a report's MIXED ENVIRONMENTS
    note, a key only one tree records is unknown, never a difference, and the git commit and visionbench version are
    not compared (`IGNORED`)."""
    va, vb = _tree_values(ra), _tree_values(rb)
    return [
        f"{k}: A {' / '.join(sorted(va[k]))}, B {' / '.join(sorted(vb[k]))}"
        for k in sorted(va.keys() & vb.keys(), key=str.lower)
        if va[k] != vb[k]
    ]


def _tree_values(runs: pd.DataFrame) -> dict[str, set[str]]:
    """{key: the set of its values, as the report shows them} over the scored runs' environments."""
    out: dict[str, set[str]] = {}
    for text in runs.loc[runs["status"].isin(TRAINED), "environment"].dropna():
        for key, value in leaves(json.loads(text)).items():
            if key not in IGNORED:
                out.setdefault(key, set()).add(shown(value))
    return out


def mixed_note(lines: list[str]) -> str:
    """The note above a table whose runs come from more than one environment (`mixed_environments`' lines)."""
    return (
        "MIXED ENVIRONMENTS: the runs of this table come from more than one environment — "
        + "; ".join(lines)
        + ". A difference between activations may be the environment's; rerun them in one environment "
        "(`make install` installs the locked one), or pass --strict-env to refuse such a table"
    )


def strict_env_refusal(table: str, lines: list[str]) -> str:
    """--strict-env's one line for the table `table` whose runs come from several environments."""
    return (
        f"--strict-env: the runs of {table} come from different environments ({'; '.join(lines)}); rerun them "
        "in one environment (`make install` installs the locked one), report each environment's runs from its "
        "own results directory, or drop --strict-env to report them with a MIXED ENVIRONMENTS note"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _code(packages: dict, commits: list[str]) -> str:
    """`visionbench 0.1.0 (git abc1234+dirty)`, `+ N other commits` when its runs come from several."""
    git = ""
    if commits:
        sha = str(commits[0])
        git = f"git {sha[:7]}{'+dirty' if sha.endswith('+dirty') else ''}"
        git += f" + {_plural(len(commits) - 1, 'other commit')}" if len(commits) > 1 else ""
    version = f"visionbench {packages['visionbench']}" if packages.get("visionbench") else ""
    return f"{version} ({git})".strip() if git else version


def _device(env: dict) -> list[str]:
    """`CPU AMD EPYC, AVX2 kernels, 2 threads`, the GPU, the determinism switches that are on."""
    device, switches = env.get("device") or {}, env.get("determinism") or {}
    cpu = [
        f"CPU {device['cpu']}" if device.get("cpu") else "",
        f"{device['cpu_capability']} kernels" if device.get("cpu_capability") else "",
        _plural(env["threads"], "thread") if isinstance(env.get("threads"), int) else "",
    ]
    parts = [", ".join(filter(None, cpu))] if any(cpu) else []
    if device.get("gpu"):
        parts.append(f"GPU {device['gpu']} (CUDA {device.get('cuda')}, cuDNN {device.get('cudnn')})")
    return parts + [name.replace("_", " ") for name in sorted(switches) if switches[name] is True]


def _data(data) -> list[str]:
    """`data sha256 1a2b3c4d5e6f` (`(file list)` for a digest of one), `data synthetic`; [] when not recorded."""
    if not isinstance(data, dict):
        return []
    if not data.get("sha256"):
        return [f"data {data.get('of', 'unknown')}"]
    return [f"data sha256 {data['sha256'][:12]}" + (" (file list)" if "n_files" in data else "")]


def _described(env: dict, commits: list[str]) -> list[str]:
    """The footer's parts for one environment (`commits`: its runs' git commits, most common first)."""
    packages = env.get("packages") or {}
    parts = [f"python {env['python']}"] if env.get("python") else []
    parts += [f"{p} {packages[p]}" for p in PACKAGES if packages.get(p)]
    parts += list(filter(None, [_code(packages, commits)])) + _device(env)
    parts += [f"{name}={value}" for name, value in sorted((env.get("env") or {}).items()) if value is not None]
    return parts + _data(env.get("data"))


def _merged(envs: list[dict]) -> dict:
    """One environment from several that agree where they overlap: each leaf from the first that records it."""
    out: dict = {}
    for env in envs:
        for key, value in env.items():
            if isinstance(value, dict) and key != "data":
                for k, v in value.items():
                    out.setdefault(key, {}).setdefault(k, v)
            else:
                out.setdefault(key, value)
    return out


def environment_footer(runs: pd.DataFrame) -> str:
    """One line naming the environment of a table's runs (module docstring); where they come from several
    (`mixed_environments`), the one most of them share (the first run's on a tie) and `+ N other environments, see above`.
    "" when no run records one. Deterministic given the runs (no clock, sorted keys): committed tables are
    regenerated byte for byte."""
    recorded = _recorded(runs)
    if not recorded:
        return ""
    split = _split(recorded)
    signatures = [
        tuple(shown(flat[k]) if k in flat else None for k in split) for flat in (leaves(env) for _, env in recorded)
    ]
    complete = [sig for sig in signatures if None not in sig] or signatures
    groups = Counter(complete)  # a run lacking a differing key (unknown) is not counted as an environment apart
    common = groups.most_common(1)[0][0]
    members = [env for (_, env), sig in zip(recorded, signatures) if sig == common]
    env = _merged(members + [e for _, e in recorded])  # the unknowns of `members` agree among all runs
    commits = [c for c, _ in Counter(e["git_commit"] for e in members if e.get("git_commit")).most_common()]
    n = len(groups) - 1
    others = f" · + {_plural(n, 'other environment')}, see above" if n else ""
    placed = _placement([e.get("placement") for _, e in recorded])
    return "Environment: " + " · ".join(_described(env, commits) + placed) + others


def _placement(records: list) -> list[str]:
    """`parallel=4 per GPU (8 workers), MPS on`, `parallel=1/2`: K per device over the table's runs, the most workers
    and the MPS state; [] where no run records it (runs from before it was recorded)."""
    records = [r for r in records if isinstance(r, dict) and isinstance(r.get("parallel"), int)]
    if not records:
        return []
    ks = "/".join(str(k) for k in sorted({r["parallel"] for r in records}))
    gpu = " per GPU" if any(r.get("visible_gpu") is not None for r in records) else ""
    workers = max(int(r.get("workers") or 1) for r in records)
    mps = sorted({r["mps"] for r in records if isinstance(r.get("mps"), bool)}, reverse=True)
    states = "/".join("on" if m else "off" for m in mps)
    return [
        f"parallel={ks}{gpu}"
        + (f" ({workers} workers)" if gpu and workers > 1 else "")
        + (f", MPS {states}" if mps else "")
    ]
