"""What one forward + backward of an activation on the Triton path launches, found without a GPU: the Triton kernels
with their arguments (recorded instead of launched), the ATen ops that run a kernel of their own, and the bytes each
moves.

    launches = launches_of(act, x)       # act(x), then its backward; nothing is computed
    launches.triton, launches.aten      # [Launch(...)], [Op(...)]; .count, .bytes

The Triton path is taken as on a GPU (`fused.backend` "triton", `triton_ops.runs_on` true for the CPU tensors here),
but every kernel launch is recorded by `triton_template.recording` and skipped, so the tensors keep whatever was in
memory: shapes, strides and the launch arguments are exact, the values meaningless. ATen ops are counted by a
dispatch mode: an op launches a kernel when it writes memory (a mutating op, or an output that is no view of an input),
allocations (`empty`, the kernels' outputs) and views excepted. Bytes moved: every tensor an op or kernel reads or
writes, once (the model a memory-bound elementwise kernel is timed by): GELU's forward + backward moves 20 bytes per
fp32 element (x in, y out; x and grad_y in, grad_x out).
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..activations import fused, triton_ops, triton_template

ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros_like", "detach"}


@dataclasses.dataclass(frozen=True)
class TensorArg:
    """A tensor argument as a launch record keeps it: what Triton specialises on (dtype, address) and its size. No
    reference to the tensor itself: a kept reference would make autograd copy a gradient it could take as is."""

    dtype: torch.dtype
    address: int
    numel: int
    nbytes: int

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorArg:
        return cls(t.dtype, t.data_ptr(), t.numel(), t.numel() * t.element_size())

    def data_ptr(self) -> int:  # what Triton's specialisation reads
        return self.address


@dataclasses.dataclass
class Launch:
    """One recorded Triton launch: the kernel, its grid, its positional arguments (tensors as `TensorArg`) and
    keyword options."""

    kernel: object
    grid: tuple
    args: tuple
    options: dict

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__

    @property
    def bytes(self) -> int:
        """Every distinct tensor argument, read or written once (unused coefficient slots repeat a tensor)."""
        return sum({(a.address, a.numel, a.dtype): a.nbytes for a in self.args if isinstance(a, TensorArg)}.values())


@dataclasses.dataclass
class Op:
    """One ATen op that runs a kernel: its name and the bytes of its tensor inputs and outputs."""

    name: str
    bytes: int


@dataclasses.dataclass
class Launches:
    triton: list[Launch] = dataclasses.field(default_factory=list)
    aten: list[Op] = dataclasses.field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.triton) + len(self.aten)

    @property
    def bytes(self) -> int:
        return sum(launch.bytes for launch in self.triton) + sum(op.bytes for op in self.aten)


def _distinct_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        seen[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
    return sum(seen.values())


class _CountOps(TorchDispatchMode):
    """Records every ATen op that runs a kernel of its own (see the module docstring)."""

    def __init__(self, into: list[Op]):
        super().__init__()
        self.into = into

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        inputs = [t for t in _tensors(args) + _tensors(kwargs) if isinstance(t, torch.Tensor)]
        outputs = [t for t in _tensors(out) if isinstance(t, torch.Tensor)]
        storages = {_storage(t) for t in inputs}
        writes = func._schema.is_mutable or any(_storage(t) not in storages for t in outputs)
        if writes and name not in ALLOCATIONS and not _is_view(func):
            self.into.append(Op(name, _distinct_bytes(inputs + outputs)))
        return out


def _tensors(tree) -> list:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _is_view(func) -> bool:
    return any(a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns)


@contextlib.contextmanager
def capture():
    """The Triton path, taken as on a GPU and recorded instead of launched, inside this block (see the docstring)."""
    launches = Launches()

    def record(kernel, grid, args, options):
        kept = tuple(TensorArg.of(a) if isinstance(a, torch.Tensor) else a for a in args)
        launches.triton.append(Launch(kernel, tuple(grid), kept, dict(options)))

    on_any_device = mock.patch.object(triton_ops, "runs_on", lambda x: x.dtype in triton_ops.DTYPES)
    with on_any_device, fused.use_backend("triton", "capture"), triton_template.recording(record):
        with _CountOps(launches.aten):
            yield launches


def launches_of(module: torch.nn.Module, x: torch.Tensor) -> Launches:
    """What one forward + backward of `module` on `x` launches (its inputs built before the counting starts)."""
    x = x.detach().requires_grad_(True)
    g = torch.ones_like(x)
    module.zero_grad(set_to_none=True)
    with capture() as launches:
        module(x).backward(g)
    return launches
