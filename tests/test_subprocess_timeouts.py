"""Every subprocess a test starts is bounded in time: a child that never ends (a Ctrl-C lost because the test process
ignores SIGINT under nohup or as a background job, so the child ignores it too, and trains the whole default sweep:
25 min seen) fails its test at the timeout instead of holding the suite.

The rule, read from the tests' source with `ast` (so it cannot rot): subprocess.run / call / check_call /
check_output take `timeout=`; a Popen is waited by `.communicate(timeout=...)` / `.wait(timeout=...)` (every
`.communicate()` / `.wait()` call in tests/ gives one); os.system and os.popen (no timeout possible) are not used.
A test that needs a signal disposition sets it in the child (tests/test_reliability.py `with_default_sigint`).

    .venv/bin/python -m pytest tests/test_subprocess_timeouts.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
RUNNERS = {"run", "call", "check_call", "check_output"}  # subprocess's functions that wait for the child
WAITS = {"communicate", "wait"}  # a Popen's waits


def violations(source: str, filename: str = "<test>") -> list[str]:
    """'file:line: what' for each subprocess call of `source` that could wait forever."""
    tree = ast.parse(source, filename)
    runner_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "subprocess"
        for alias in node.names
        if alias.name in RUNNERS
    }
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, keywords = node.func, {k.arg for k in node.keywords}
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner, name = func.value.id, func.attr
        elif isinstance(func, ast.Attribute):
            owner, name = None, func.attr
        elif isinstance(func, ast.Name):
            owner, name = None, func.id
        else:
            continue
        where = f"{filename}:{node.lineno}"
        if (
            (owner == "subprocess" and name in RUNNERS) or (owner is None and name in runner_names)
        ) and "timeout" not in keywords:
            out.append(f"{where}: subprocess.{name}(...) without timeout=")
        elif isinstance(func, ast.Attribute) and name in WAITS and not node.args and "timeout" not in keywords:
            out.append(f"{where}: .{name}() without a timeout")
        elif owner == "os" and name in ("system", "popen"):
            out.append(f"{where}: os.{name}(...) cannot be given a timeout; use subprocess.run(..., timeout=)")
    return sorted(out, key=lambda v: int(v.split(":")[1]))


def test_every_test_subprocess_has_a_timeout():
    found = [v for path in sorted(TESTS.rglob("*.py")) for v in violations(path.read_text(), path.name)]
    assert not found, "subprocess calls that could wait forever (give each a timeout=):\n" + "\n".join(found)


def test_the_guard_sees_the_calls_it_is_for():
    bad = """
import os, subprocess
from subprocess import check_output as co
subprocess.run(["x"], capture_output=True)
co(["x"])
p = subprocess.Popen(["x"])
p.communicate()
p.wait()
os.system("x")
"""
    good = """
import subprocess
subprocess.run(["x"], timeout=60)
p = subprocess.Popen(["x"])
p.communicate(timeout=60)
p.wait(60)
"""
    assert [v.split(": ", 1)[1] for v in violations(bad)] == [
        "subprocess.run(...) without timeout=",
        "subprocess.co(...) without timeout=",
        ".communicate() without a timeout",
        ".wait() without a timeout",
        "os.system(...) cannot be given a timeout; use subprocess.run(..., timeout=)",
    ]
    assert violations(good) == []
