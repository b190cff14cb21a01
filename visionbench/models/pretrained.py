"""Read the weights of a trained backbone from disk: a timm / PyTorch state dict or a visionbench run's checkpoint.

    >>> ckpt = read_checkpoint("convnext_tiny.pth")                                  # timm / torch file
    >>> ckpt = read_checkpoint("runs/digits_vgg4/gelu/seed_0/checkpoints/best.ckpt")
    >>> ckpt.state_dict, ckpt.kind, ckpt.trained_act                                 # "visionbench", "gelu"

Accepted files: `.pth`, `.pt`, `.bin`, `.ckpt`, `.pth.tar` (torch files; the state dict may be the whole file or
nested under `state_dict`, `model`, `module`, with the EMA under `state_dict_ema` / `model_ema`) and
`.safetensors`. What a visionbench run's checkpoint looks like (and where its config.yaml is) is the
results tree's business: `results.checkpoint.run_weights` unwraps it. Pure torch: no Lightning import.
"""

from __future__ import annotations

import argparse
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..results.checkpoint import run_weights

TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".tar")  # .tar: timm train.py's model_best.pth.tar
SAFETENSORS_SUFFIX = ".safetensors"
RAW_KEYS = ("state_dict", "model", "module")  # where trainers nest the weights (timm, ConvNeXt, DeiT)
EMA_KEYS = ("state_dict_ema", "model_ema")  # timm train.py / ConvNeXt main.py EMA copies


@dataclass
class Checkpoint:
    """Weights read from one file.

    Attributes:
        path: the file.
        state_dict: the network's tensors, keys as in `model.state_dict()` (prefixes removed).
        kind: "visionbench" (a run's checkpoint) or "state_dict" (anything else).
        ema: whether `state_dict` holds the EMA weights.
        trained_act, trained_act_kwargs, trained_model: what a visionbench run's config.yaml says
            trained the weights (None / {} for other files, or if it is absent).
        missing_config: for a visionbench checkpoint without its config.yaml, where it was looked for.
    """

    path: Path
    state_dict: dict[str, torch.Tensor]
    kind: str
    ema: bool = False
    trained_act: str | None = None
    trained_act_kwargs: dict[str, Any] = field(default_factory=dict)
    trained_model: str | None = None
    missing_config: str | None = None


def accepted_suffixes() -> tuple[str, ...]:
    return TORCH_SUFFIXES + (SAFETENSORS_SUFFIX,)


def check_path(path: Path) -> None:
    """FileNotFoundError for a missing file or a directory, ValueError for an unknown suffix."""
    if path.is_dir():
        found = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.suffix in accepted_suffixes())
        raise FileNotFoundError(
            f"finetune checkpoint {path} is a directory; give one file"
            + (f", e.g. {', '.join(found[:4])} inside it" if found else "")
            + f" (accepted: {', '.join(accepted_suffixes())})"
        )
    if not path.exists():
        raise FileNotFoundError(
            f"finetune checkpoint {path} does not exist; give a state dict "
            f"({', '.join(accepted_suffixes())}), a visionbench run's checkpoints/best.ckpt "
            f"or last.ckpt, or 'timm' for timm's pretrained weights"
        )
    if path.suffix not in accepted_suffixes():
        raise ValueError(
            f"finetune checkpoint {path}: unknown file type {path.suffix!r}; accepted: {', '.join(accepted_suffixes())}"
        )


def _load_file(path: Path) -> Any:
    if path.suffix == SAFETENSORS_SUFFIX:
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ValueError(
                f"{path}: reading .safetensors needs the `safetensors` package "
                f"(pip install safetensors), or convert the file to .pth"
            ) from None
        try:
            return load_file(str(path), device="cpu")
        except Exception as e:  # noqa: BLE001 - safetensors reports a torn header in its own way
            raise _unreadable(path, e) from None
    try:  # tensors and plain containers only: a checkpoint is data, not code (timm train.py adds its argparse args)
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:  # a real checkpoint that also pickles objects (code, not data)
            raise ValueError(
                f"{path}: cannot be read as weights only (it pickles {found.group(1)}); re-save its "
                f"state dict with torch.save(model.state_dict(), ...)"
            ) from None
        raise _unreadable(path, e) from None
    except Exception as e:  # noqa: BLE001 - a text file, a torn download: torch says "KeyError: 101" and the like
        raise _unreadable(path, e) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:120] if text else type(e).__name__


def _unreadable(path: Path, e: BaseException) -> ValueError:
    """A file that is no torch checkpoint at all (text, truncated, another format): name it and what is accepted."""
    return ValueError(
        f"{path} is not a readable torch checkpoint ({type(e).__name__}: {_first_line(e)}); give a "
        f"file saved with torch.save (e.g. a state dict) or a visionbench run's checkpoints/best.ckpt"
    )


def _is_tensor_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def _strip(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def read_checkpoint(path: str | Path, ema: bool = False) -> Checkpoint:
    """Read the network weights stored in `path`.

    Args:
        path: a state-dict file or a visionbench run checkpoint (see the module docstring).
        ema: read the weight-EMA copy instead of the raw weights (ValueError if the file has none).

    Returns:
        A `Checkpoint`. FileNotFoundError for a missing file or a directory; ValueError for an
        unknown file type or a file without a recognisable state dict.
    """
    path = Path(path).expanduser()
    check_path(path)
    obj = _load_file(path)
    run = run_weights(obj, path, ema)
    if run is not None:
        return Checkpoint(
            path, run.state_dict, "visionbench", ema, run.act, run.act_kwargs, run.model_name, run.missing_config
        )
    keys = EMA_KEYS if ema else RAW_KEYS
    state = next((obj[k] for k in keys if isinstance(obj, dict) and _is_tensor_dict(obj.get(k))), None)
    if state is None and not ema and _is_tensor_dict(obj):
        state = obj
    if state is None:
        top = ", ".join(sorted(map(str, obj))[:12]) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(
            f"{path}: no {'EMA ' if ema else ''}state dict found; looked for a dict of tensors "
            f"{'under ' + ', '.join(keys) if ema else 'at the top level or under ' + ', '.join(keys)}; "
            f"the file holds: {top}"
        )
    if all(k.startswith("module.") for k in state):  # saved from DistributedDataParallel
        state = _strip(state, "module.")
    return Checkpoint(path, dict(state), "state_dict", ema)
