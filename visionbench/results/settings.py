"""The label of a factor setting: its directory under the recipe and its column in the report.

    setting_label({"model.norm": None, "model.lsuv": True})    # 'model.norm=null,model.lsuv=true'
    parse_setting_label("model.norm=null,model.lsuv=true")     # {'model.norm': None, 'model.lsuv': True}
    format_value([0.6, 1.0])                                   # '[0.6,1.0]'

Values are written as YAML reads them back, without spaces, so a label is one directory level
(`runs/<recipe>/<setting>/<act>/seed_<k>`) and round-trips to the values the runs used.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# a setting label's items start at a comma followed by `key=` (keys are dotted names; values written
# by format_value hold no `,name=` of their own)
_ITEM = re.compile(r",(?=[A-Za-z_][\w.]*=)")


def format_value(value: Any) -> str:
    """A value as YAML reads it back, without spaces: `null`, `true`, `0.5`, `[5,4]`, `gelu`."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("...\n").strip()


def setting_label(setting: dict[str, Any]) -> str:
    """`model.lsuv=true,model.norm=group`: the directory of a setting's runs ('' without factors)."""
    label = ",".join(f"{k}={format_value(v)}" for k, v in setting.items())
    return label.replace("/", "|")  # one directory level, whatever the value


def parse_setting_label(label: str) -> dict[str, Any]:
    """The inverse of `setting_label`."""
    out: dict[str, Any] = {}
    for item in _ITEM.split(label) if label else []:
        key, value = item.split("=", 1)
        text = value.replace("|", "/")
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key] = text
    return out
