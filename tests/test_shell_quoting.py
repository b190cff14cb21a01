"""Commands the docs print paste into any shell (docs/configuration.md, "Quoting"): an override holding brackets
(`act=rational[init=gelu]`, `tune=optim.lr:log[1e-4,1e-1]`, `trainer.loggers=[tensorboard,wandb]`) is a glob
pattern to zsh (macOS's default shell), which stops with "no matches found" when no file matches it; quoted, every
shell passes it as it is. This test reads every `visionbench` command line in README.md and docs/*.md (fenced code
blocks, their `\\` continuations, and inline code) and fails on an unquoted bracket in an argument; where zsh is
installed, a documented quoted line also goes through zsh itself.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S* )*(?:python3? -m )?visionbench(?:\.sweep\.hydra_app)?\s+(\S+)")


def words(line: str) -> list[tuple[str, bool]]:
    """The shell words of `line` up to a comment: (the word as written, whether it holds an unquoted `[`)."""
    out, word, bare_bracket, quote, i = [], "", False, "", 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(line):
            word, i = word + line[i : i + 2], i + 2
            continue
        elif c.isspace():
            if word:
                out.append((word, bare_bracket))
            word, bare_bracket = "", False
            i += 1
            continue
        elif c == "#" and not word:
            break
        elif c == "[" and word:  # `[--quick]` / `[key=value ...]`: a usage line's optional part, not an argument
            bare_bracket = True
        word += c
        i += 1
    if word:
        out.append((word, bare_bracket))
    return out


def command_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of each visionbench command in `path`: fenced blocks' lines (continuations
    joined) and inline code spans."""
    found, fenced, pending = [], False, None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("```"):
            fenced, pending = not fenced, None
            continue
        if fenced:
            if pending is not None:
                start, text = pending
                text += " " + line.rstrip("\\").strip()
                pending = (start, text) if line.endswith("\\") else None
                if pending is None:
                    found.append((start, text))
            elif _is_command(line):
                if line.endswith("\\"):
                    pending = (n, line.rstrip("\\").strip())
                else:
                    found.append((n, line))
            continue
        found += [(n, span) for span in re.findall(r"`([^`]+)`", raw) if _is_command(span)]
    return found


def _is_command(text: str) -> bool:
    """A command line, not a message quoted from one (`visionbench run: ...`)."""
    m = COMMAND.match(text.strip())
    return bool(m) and not m.group(1).endswith(":")


def unquoted_brackets(path: Path) -> list[str]:
    """`file:line: word` of each argument with an unquoted bracket; a usage line (one with an optional `[...]` part,
    `visionbench check act=NAME[k=v,...] [--quick]`, as `visionbench --help` prints it) is no command to paste."""
    found = []
    for n, line in command_lines(path):
        split = words(line)
        if any(word.startswith("[") for word, _ in split):
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {word}" for word, bare in split if bare]
    return found


def test_the_scanner_finds_an_unquoted_bracket_and_accepts_a_quoted_one():
    assert [w for w, bare in words("visionbench run act=rational[init=gelu] seeds=2") if bare] == [
        "act=rational[init=gelu]"
    ]
    assert not any(bare for _, bare in words("visionbench run 'act=rational[init=gelu]' \"tune=x:log[1,2]\""))
    assert not any(bare for _, bare in words("visionbench run [act=a,b] [--quick]  # act=x[y]"))
    assert _is_command("python -m visionbench.sweep.hydra_app -m act=relu")
    assert not _is_command("visionbench run: snapshot_epochs=[0, 99] names epoch(s) 99")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_documented_commands_quote_their_brackets(path):
    assert unquoted_brackets(path) == [], "quote these for zsh ('act=rational[init=gelu]'): docs/configuration.md"


def test_the_readme_shows_the_quoted_forms_and_says_why():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "'act=rational[init=gelu]'" in readme and "'tune=optim.lr:log[1e-4,1e-1]" in readme
    assert "zsh" in readme and "noglob" in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_a_quoted_line_reaches_visionbench_as_written():
    """What every POSIX shell does with the quotes (shlex is POSIX sh's word splitting): the brackets arrive."""
    line = quoted_readme_line()
    argv = shlex.split(line)
    assert [a for a in argv if "[" in a] == re.findall(r"'([^']*\[[^']*)'", line), argv


def quoted_readme_line() -> str:
    """The README's first command line with a quoted bracket argument (the tuning design's)."""
    return next(text for _, text in command_lines(ROOT / "README.md") if re.search(r"'[^']*\[", text))


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
def test_zsh_passes_a_documented_quoted_line_and_refuses_it_unquoted(tmp_path):
    line = quoted_readme_line()
    stub = "visionbench() { printf '%s\\n' \"$@\" }\n"  # prints the arguments zsh passes, one per line

    def zsh(text: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["zsh", "-f", "-c", stub + text], capture_output=True, text=True, cwd=tmp_path, timeout=30
        )

    done = zsh(line)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shlex.split(line)[1:]
    bare = zsh(line.replace("'", ""))  # what the docs wrote before: zsh refuses it
    assert bare.returncode != 0 and "no matches found" in bare.stderr
