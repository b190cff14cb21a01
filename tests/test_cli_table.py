"""One door per thing: the `visionbench` commands live in one table (visionbench/cli.py `COMMANDS`), and the usage,
the unknown-command line, docs/layout.md's "Commands" list and the rooms diagram's cli.py line all agree with it;
`imports=` is read once on the command line (`take_imports`) and loaded through one call (`plugins.load`);
`visionbench --version`; `import visionbench` is cheap and its public names resolve.

    .venv/bin/python -m pytest tests/test_cli_table.py -q
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import visionbench
from visionbench import cli
from visionbench.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
NAMES = [c.name for c in COMMANDS]


def section(text: str, heading: str) -> str:
    """The body of markdown section `heading` (up to the next `## `)."""
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_table_names_each_command_once_with_a_handler():
    assert len(NAMES) == len(set(NAMES)) >= 11
    assert NAMES[:9] == ["run", "estimate", "report", "export", "compare", "list", "bench", "plot", "papers"]
    assert {c.name for c in COMMANDS if c.takes_imports} == {"list", "bench", "check"}
    for command in COMMANDS:  # every handler resolves (the heavy modules are imported here, not at start-up)
        assert callable(command.resolve()), command.name


def test_docs_layout_lists_exactly_the_table():
    text = LAYOUT.read_text()
    listed = [line for line in section(text, "## Commands").splitlines() if line.startswith("- `visionbench ")]
    assert listed == [f"- `visionbench {c.name} {c.synopsis}`: {c.summary}" for c in COMMANDS]
    # the rooms diagram: the cli.py entry (its line and the indented ones under it) names every command, in order
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("cli.py "))
    entry = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 20):
            break
        entry.append(line)
    words = " ".join(" ".join(entry).split())
    found = re.search(r"the command table \(Commands, above\): ([a-z, ]+);", words)
    assert found and found.group(1).split(", ") == NAMES, words


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    visionbench {command.name} {command.synopsis}\n        {command.summary}\n" in out
    assert main([]) == 2 and "visionbench run [recipe=NAME]" in capsys.readouterr().out


def test_an_unknown_command_is_one_line_with_a_suggestion(capsys):
    assert main(["nope"]) == 2
    assert (
        capsys.readouterr().err
        == f"visionbench: unknown command 'nope'; commands: {', '.join(NAMES)} (`visionbench -h`)\n"
    )
    assert main(["rn"]) == 2
    assert capsys.readouterr().err.startswith("visionbench: unknown command 'rn' (did you mean run?); commands: run, ")


@pytest.mark.parametrize("name", ["run", "estimate", "list"])
def test_the_tables_own_help_texts(name, capsys):
    assert main([name, "-h"]) == 0
    out = capsys.readouterr().out
    assert out == cli.BY_NAME[name].help + "\n" and out.startswith(f"usage: visionbench {name} ")


def test_bench_names_its_benchmarks_from_their_one_table(capsys):
    from visionbench.bench import BENCHMARKS, USAGE

    assert cli.BY_NAME["bench"].synopsis == "|".join(BENCHMARKS) + " [...]"
    assert main(["bench", "-h"]) == 0
    out = capsys.readouterr().out
    assert out == USAGE + "\n"
    for name, benchmark in BENCHMARKS.items():
        assert f"    visionbench bench {name} {benchmark.arguments}\n        {benchmark.summary}\n" in out
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"visionbench bench: unknown benchmark 'nope'; benchmarks: {', '.join(BENCHMARKS)} (`visionbench bench -h`, "
        "docs/bench.md)\n"
    )


@pytest.mark.parametrize("name", ["activations", "train", "fit", "data", "fill", "sweep", "warm", "kernels"])
def test_every_benchmark_of_the_table_answers_its_own_help_through_the_one_door(name, capsys):
    from visionbench.bench import BENCHMARKS

    assert list(BENCHMARKS) == ["activations", "train", "fit", "data", "fill", "sweep", "warm", "kernels"]
    assert main(["bench", name, "-h"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: visionbench bench {name} ")


def test_a_command_with_nothing_to_load_imports_no_plugin_machinery():
    """`python -m visionbench bench ...` on a lent GPU: no `imports=` and no installed plugin, so neither plugins.py
    nor the config layer's Hydra (absent there) is imported; the group read is plugins.py's."""
    from visionbench import plugins

    assert cli.PLUGIN_GROUP == plugins.GROUP and not cli.installed_plugins()
    code = (
        "import sys; from visionbench.cli import main; rc = main(['bench', 'nope']); "
        "print(rc, 'visionbench.plugins' in sys.modules, 'hydra' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["2", "False", "False"], done.stderr


def test_version_is_the_installed_packages(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"visionbench {version('visionbench')}\n"
    assert visionbench.__version__ == version("visionbench")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{visionbench.__version__}"\n' in pyproject  # an editable install: the same


def test_import_visionbench_is_cheap_and_its_public_names_resolve():
    code = (
        "import json, sys, visionbench; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'torchvision', 'timm', 'lightning', 'pandas', 'omegaconf') or m.startswith('visionbench.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == []
    for name in visionbench.__all__:
        assert getattr(visionbench, name) is not None, name
    assert visionbench.run_sweep.__module__ == "visionbench.sweep.sweep"
    assert visionbench.load_config.__module__ == "visionbench.sweep.preflight"
    assert visionbench.load_runs.__module__ == "visionbench.report.collect"
    assert "relu" in visionbench.activations.names() and "vgg4" in visionbench.models.names()
    with pytest.raises(AttributeError):
        visionbench.no_such_name  # noqa: B018


def test_imports_is_taken_out_of_argv_once():
    assert cli.take_imports(["act=relu", "imports=a,b", "--quick", "+imports=c"]) == (
        ["a,b", "c"],
        ["act=relu", "--quick"],
    )


def test_the_plugins_are_loaded_by_one_call():
    """`plugins.load(` is called once in the package (the command line's); a config's `imports` goes through
    `plugins.load_for` (sweep/preflight.py and the sweep's worker)."""
    calls = [
        (path.relative_to(ROOT).as_posix(), line.strip())
        for path in sorted((ROOT / "visionbench").rglob("*.py"))
        for line in path.read_text().splitlines()
        if "plugins.load(" in line
    ]
    assert [path for path, _ in calls] == ["visionbench/cli.py"], calls


def test_the_layout_page_names_every_room_and_every_report_file():
    """docs/layout.md stays current: every room (a package of visionbench/) in its diagram, every file of report/ in
    its file-by-file list."""
    root = Path(visionbench.__file__).parent
    page = (root.parent / "docs" / "layout.md").read_text()
    rooms = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert len(rooms) >= 12 and not [r for r in rooms if f"{r}/" not in page], rooms
    listed = re.findall(r"^(\w+\.py) ", page.split("### report/, file by file", 1)[1], re.M)
    files = sorted(p.name for p in (root / "report").glob("*.py") if p.name != "__init__.py")
    assert sorted(listed) == files


def test_help_answers_before_torch_is_imported():
    """`visionbench check -h` took 10.6 s: it imported the checks (torch, the data) before parsing; every command's
    `-h` parses first (`plot -h` imported torch with its experiment). One process asks each command in turn and says
    after each whether torch is loaded yet (the first that loads it is the culprit)."""
    code = (
        "import sys; from visionbench.cli import main\n"
        f"for command in {list(NAMES)!r}:\n"
        "    rc = main([command, '-h'])\n"
        "    print('RESULT', command, 'torch' in sys.modules, rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    said = [line.split()[1:] for line in out.splitlines() if line.startswith("RESULT ")]
    assert said == [[command, "False", "0"] for command in NAMES], said


def test_report_help_says_how_to_select_a_stores_runs(capsys):
    assert main(["report", "-h"]) == 0
    text = capsys.readouterr().out
    assert "reading a store" in text and "recipe=A,B" in text and "config=HASH" in text and "cfg.KEY=V" in text
