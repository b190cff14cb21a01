"""Triton kernels compiled for a GPU on a machine without one, and what the compiled code says: registers per thread
and bytes spilled to local memory, from ptxas' own report of the machine code a GPU would run.

    info = compile_launch(launch, capability=90)     # a `kernel_capture.Launch`: sm_90 (H100/H200), 80 (A100)
    info.registers, info.spill_stores, info.spill_loads, info.stack
    emitted_source_compiles(launch, capability=90)   # "yes", or the error of compiling what Inductor would emit

The launch's arguments are specialised as Triton's JIT specialises them when it launches (`native_specialize_impl`:
16-byte alignment of pointers, integers divisible by 16, constexprs), so the code is the code a launch compiles.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

# what Inductor's generated module imports before a user kernel (torch/_inductor/codegen/triton.py's common imports
# that a user kernel can name): the emitted source is compiled in a module with these
INDUCTOR_PRELUDE = "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n"


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reports for one compiled kernel."""

    kernel: str
    arch: str
    warps: int
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack: int  # bytes of stack frame (local memory per thread)

    @property
    def spilled(self) -> int:
        return max(self.spill_stores, self.spill_loads)


def specialise(kernel, args: tuple) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of a launch of `kernel` with `args`, as the JIT builds them."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    signature, constexprs, attrs = {}, {}, {}
    for i, (param, arg) in enumerate(zip(kernel.params, args)):
        if param.is_constexpr:
            signature[param.name], constexprs[param.name] = "constexpr", arg
            continue
        kind, spec = native_specialize_impl(BaseBackend, arg, False, True, True)
        if kind == "constexpr":  # e.g. an integer 1
            signature[param.name], constexprs[param.name] = "constexpr", arg
            continue
        signature[param.name] = kind
        if isinstance(spec, str) and spec:
            attrs[(i,)] = BaseBackend.parse_attr(spec)
    return signature, constexprs, attrs


def compile_kernel(kernel, args: tuple, warps: int, capability: int):
    """The compiled kernel (triton.compile) for this launch on compute capability `capability`."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, attrs = specialise(kernel, args)
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": warps})


def resources(compiled, name: str, warps: int, capability: int) -> Resources:
    """ptxas' report (`-v`) on the compiled kernel's PTX, with the options Triton's own ptxas call takes."""
    from triton import knobs
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    arch = sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        done = subprocess.run(
            [
                knobs.nvidia.ptxas.path,
                "-lineinfo",
                "-v",
                "--regAllocOptLevel=2",
                f"--gpu-name={arch}",
                str(ptx),
                "-o",
                str(Path(tmp) / "kernel.o"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    report = done.stderr + done.stdout

    def number(pattern: str) -> int:
        found = re.search(pattern, report)
        return int(found.group(1)) if found else 0

    return Resources(
        kernel=name,
        arch=arch,
        warps=warps,
        registers=number(r"Used (\d+) registers"),
        spill_stores=number(r"(\d+) bytes spill stores"),
        spill_loads=number(r"(\d+) bytes spill loads"),
        stack=number(r"(\d+) bytes stack frame"),
    )


def compile_launch(launch, capability: int) -> Resources:
    """Registers and spills of a captured launch (`kernel_capture.Launch`) compiled for `capability`."""
    warps = int(launch.options.get("num_warps", 4))
    compiled = compile_kernel(launch.kernel, launch.args, warps, capability)
    return resources(compiled, launch.name, warps, capability)


def emitted_source(kernel) -> str:
    """The kernel's source as torch.compile's Inductor re-emits it for a user Triton kernel (the kernel and every
    function and constant it names, `user_defined_triton_kernel_transitive_closure_source_code`), decorated as
    Inductor decorates it."""
    from torch._inductor.codegen.wrapper import user_defined_triton_kernel_transitive_closure_source_code

    return "@triton.jit\n" + user_defined_triton_kernel_transitive_closure_source_code(kernel)


def emitted_source_compiles(launch, capability: int) -> str:
    """ "yes" when Inductor's copy of the launch's kernel compiles for `capability`, else the error's last line."""
    source = INDUCTOR_PRELUDE + emitted_source(launch.kernel)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"emitted_{launch.name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # Triton reads the source back through the module
        try:
            spec.loader.exec_module(module)
            copy = getattr(module, launch.name)
            compile_kernel(copy, launch.args, int(launch.options.get("num_warps", 4)), capability)
        except Exception as e:  # noqa: BLE001 - any failure is the answer
            return f"no: {type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}"
        finally:
            sys.modules.pop(path.stem, None)
    return "yes"
