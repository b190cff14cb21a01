"""The vocabulary of the schema's rules: a check takes a value and returns None when it is fine, else what
is accepted ("an integer >= 1"), which becomes `KEY must be <that>, got <value>`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], str | None]


def rule(
    default: Any,
    within: str | None = None,
    *,
    choices: tuple = (),
    check: Check | None = None,
    kind: Any = None,
    length: int | None = None,
) -> Any:
    """A dataclass field with its rule. `within`: ">= 1", "> 0", "[0, 1)" (for a list: each item's);
    `kind`: the type checked when the annotation is `Any` (OmegaConf keeps 20 an int there)."""
    meta = {"within": within, "choices": choices, "check": check, "kind": kind, "length": length}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _bounds(within: str | None) -> tuple:
    """(lo, hi, lo_open, hi_open) of ">= 1", "> 0", "<= 1" or "[0, 1)"."""
    if not within:
        return None, None, False, False
    w = within.replace(" ", "")
    if w[0] in "[(":
        lo, hi = w[1:-1].split(",")
        return float(lo), float(hi), w[0] == "(", w[-1] == ")"
    op, num = (w[:2], w[2:]) if w[1] == "=" else (w[:1], w[1:])
    return (float(num), None, op == ">", False) if op[0] == ">" else (None, float(num), False, op == "<")


def _range_check(what: str, ok_type: Callable[[Any], bool], within: str | None) -> Check:
    lo, hi, lo_open, hi_open = _bounds(within)
    parts = [f"{'>' if lo_open else '>='} {lo:g}"] if lo is not None else []
    parts += [f"{'<' if hi_open else '<='} {hi:g}"] if hi is not None else []
    wanted = " ".join([what, " and ".join(parts)]).strip()

    def check(v: Any) -> str | None:
        if not ok_type(v):
            return wanted
        if not math.isfinite(v):  # NaN, inf: no key of the schema means "unbounded" by it
            return wanted.replace("a number", "a finite number", 1)
        if lo is not None and (v <= lo if lo_open else v < lo):
            return wanted
        return wanted if hi is not None and (v >= hi if hi_open else v > hi) else None

    return check


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is(ok: Callable[[Any], bool], wanted: str) -> Check:
    return lambda v: None if ok(v) else wanted


def integer(within: str | None = None) -> Check:
    return _range_check("an integer", is_int, within)


def number(within: str | None = None) -> Check:
    return _range_check("a number", is_number, within)


def at_most(check: Check, cap: int) -> Check:
    """`check`, and no more than `cap`: a bound that only a typo reaches (1e20 seeds), said only to who reaches it."""

    def capped(v: Any) -> str | None:
        return check(v) or (f"{check(object())} and <= {cap}" if v > cap else None)

    return capped


boolean = _is(lambda v: isinstance(v, bool), "true or false")
text = _is(lambda v: isinstance(v, str) and bool(v), "a non-empty string")
# a directory (YAML may read one as 123); `results_dir=` (empty) would mean the current directory, which nobody means
path = _is(lambda v: is_number(v) or (isinstance(v, str) and bool(v.strip())), "a non-empty path")
mapping = _is(lambda v: isinstance(v, dict), "a mapping")


def did_you_mean(word: str, known: Any, n: int = 2) -> str:
    """` (did you mean a or b?)` for the entries of `known` close to `word`; "" when none is."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=n)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def choice(*values: Any) -> Check:
    """One of `values`, of the same type (`1` is not `true`)."""

    def check(v: Any) -> str | None:
        if any(v == a and type(v) is type(a) for a in values):
            return None
        return "one of " + ", ".join("null" if a is None else str(a) for a in values) + did_you_mean(str(v), values)

    return check


def optional(check: Check) -> Check:
    def or_null(v: Any) -> str | None:
        wanted = check(v) if v is not None else None
        return f"null or {wanted}" if wanted else None

    return or_null


def list_of(item: Check, length: int | None = None) -> Check:
    wanted = f"a list{f' of {length} values' if length else ''}, each {item(object())}"

    def check(v: Any) -> str | None:
        if not isinstance(v, list) or (length is not None and len(v) != length):
            return wanted
        return wanted if any(item(x) for x in v) else None

    return check


def any_of(*checks: Check) -> Check:
    def check(v: Any) -> str | None:
        wanted = [c(v) for c in checks]
        return None if any(w is None for w in wanted) else " or ".join(w for w in wanted if w)

    return check


def check_of(f: dataclasses.Field, hint: Any) -> Check | None:
    """The one check of a field: its own `check`, else its type (the annotation, or `kind` where that
    is Any) with its range or choices; None for `Any` without a rule (anything goes)."""
    return _check(f.metadata, f.metadata.get("kind") or hint)


def _check(meta: Any, hint: Any) -> Check | None:
    args = typing.get_args(hint)
    if type(None) in args:  # Optional[X]
        inner = _check(meta, next(a for a in args if a is not type(None)))
        return optional(inner) if inner else None
    if meta.get("check"):
        return meta["check"]
    if meta.get("choices"):
        return choice(*meta["choices"])
    origin = typing.get_origin(hint)
    if origin is list:
        item = _check({"within": meta.get("within")}, args[0]) if args else None
        return list_of(item, meta.get("length")) if item else _is(lambda v: isinstance(v, list), "a list")
    if origin is dict:
        return mapping
    within = meta.get("within")
    return {bool: boolean, str: text, int: integer(within), float: number(within)}.get(hint)
