"""A Triton backend on mpsrt: unmodified `import triton` / `@triton.jit` kernels run on the
GPU mpsrt drives (Metal, Vulkan; lavapipe in CI).

Triton finds this package through the `triton.backends` entry point (name `wgpu`) and imports
`compiler` (a `BaseBackend`: Triton's own TTIR passes, then TTIR text → WGSL in Rust,
`mpsrt-jit`) and `driver` (a `DriverBase`: pipelines, launches with mpsrt tensors, device
properties, a benchmarker for `@triton.autotune`, `set_kernel_config` and `memory_pool`).

The driver is active when a GPU adapter exists and no native Triton driver (CUDA, HIP) is; set
`TRITON_DEFAULT_BACKEND=wgpu` to choose it next to one.

>>> import os; os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")
>>> import triton, triton.language as tl, mpsrt
>>> @triton.jit
... def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
...     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
...     m = offs < n
...     tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
>>> add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)   # x, y, out: mpsrt tensors
"""
from __future__ import annotations

BACKEND_NAME = "wgpu"
TARGET_ARCH = "wgsl"
WARP_SIZE = 32


def _install_tensor_protocol() -> None:
    """Triton treats arguments with `data_ptr()` and `dtype` as pointers. mpsrt tensors get a
    `data_ptr()` that is a stable, 16-byte-aligned token for their storage plus the view's byte
    offset: Triton uses it only for its divisibility-by-16 specialization; the launcher binds
    the tensor's buffer and passes the view offset itself."""
    from .._tensor import Tensor

    if getattr(Tensor, "data_ptr", None) is not None:
        return
    sizes = {"float16": 2, "bool": 1, "uint8": 1, "int8": 1, "float64": 8, "int64": 8}

    def data_ptr(self) -> int:  # called for every tensor argument of every launch
        t = self._t
        off = t.offset
        return (1 << 32) + off * sizes.get(t.dtype, 4) if off else 1 << 32

    def element_size(self) -> int:
        return sizes.get(self._t.dtype, 4)

    Tensor.data_ptr = data_ptr
    if getattr(Tensor, "element_size", None) is None:
        Tensor.element_size = element_size


try:
    _install_tensor_protocol()
except Exception as _e:  # never break `import triton` (it imports every backend) over mpsrt
    import warnings
    warnings.warn(f"mpsrt Triton backend: mpsrt tensors lack data_ptr(): {_e}")
