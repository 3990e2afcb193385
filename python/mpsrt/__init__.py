"""mpsrt: a GPU deep-learning runtime (wgpu + WGSL: Metal on macOS, Vulkan elsewhere) with a
Paddle/PyTorch-style MPS API and Triton-language kernels.

>>> import mpsrt
>>> if mpsrt.is_compiled_with_mps() and mpsrt.mps.is_available():
...     x = mpsrt.randn([2, 3], dtype='float32', place='mps')
...     print((x + x).numpy())
"""
from __future__ import annotations

from . import _C
from . import mps, nn  # noqa: F401
from . import language  # noqa: F401
from ._tensor import Tensor, from_dlpack, to_tensor
from ._ops import *  # noqa: F401,F403
from ._ops import (_funcs, arange, assign, broadcast_to, cast, clamp, clip, empty,  # noqa: F401
                   empty_like, expand, flatten, full, full_like, manual_seed, matmul, ones,
                   ones_like, permute, rand, randn, reshape, rsqrt, seed, square, squeeze,
                   transpose, unsqueeze, where, zeros, zeros_like)
from ._jit import (Autotuner, Config, JITFunction, autotune, cdiv, compile_kernel,  # noqa: F401
                   heuristics, jit, next_power_of_2)
from . import onnx  # noqa: F401,E402 - ONNX sessions; `mpsrt.onnx.backend` imports `onnx` lazily

globals().update(_funcs)

__version__ = "0.1.0"

bool = "bool"  # noqa: A001 - dtype names, as paddle.float32 / torch.float32
uint8 = "uint8"
int8 = "int8"
int32 = "int32"
int64 = "int64"
float16 = "float16"
float32 = "float32"
float64 = "float64"


def is_compiled_with_mps() -> "builtins.bool":  # type: ignore[name-defined]
    """True: mpsrt always ships its GPU backend (use `mpsrt.mps.is_available()` for a device)."""
    return True


def set_device(device: str) -> str:
    """Sets the default place of new tensors: `'cpu'`, `'mps'` or `'mps:N'` (also `'gpu'`)."""
    p = _C.canonical_place(str(device))
    if p.startswith("mps:"):
        mps.set_device(p)
    _C.set_default_place(p)
    return p


def get_device() -> str:
    """The default place of new tensors (`'cpu'` unless `set_device` or `MPSRT_DEVICE=gpu`)."""
    return _C.default_place()
