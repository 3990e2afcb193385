"""`mpsrt.language` (`import mpsrt.language as tl`): the names Triton kernels use.

Kernels are compiled from their Python source by the Rust compiler (`mpsrt-jit`); the functions
here exist so that kernel modules import and so host code may call the helpers. Calling a
device function (e.g. `tl.load`) outside a kernel raises.
"""
from __future__ import annotations


class constexpr:
    """Annotation for compile-time parameters: `BLOCK_SIZE: tl.constexpr`."""

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        return f"constexpr({self.value!r})"


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"tl.{self.name}"


float16 = dtype("float16")
float32 = dtype("float32")
int32 = dtype("int32")
int1 = dtype("int1")
int8 = dtype("int8")
uint8 = dtype("uint8")
float64 = dtype("float64")
int64 = dtype("int64")
bfloat16 = dtype("bfloat16")


def cdiv(a, b):
    """Ceiling division (also usable on the host)."""
    return -(-a // b)


def _device_only(name):
    def f(*args, **kwargs):
        raise RuntimeError(f"[jit] tl.{name} can only be called inside an @mpsrt.jit kernel")
    f.__name__ = name
    return f


for _n in ["program_id", "num_programs", "arange", "load", "store", "zeros", "full", "dot",
           "sum", "max", "min", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin",
           "cos", "sigmoid", "where", "maximum", "minimum", "assume", "multiple_of",
           "max_contiguous", "argmax", "argmin", "fma", "reshape", "broadcast_to"]:
    globals()[_n] = _device_only(_n)


def range(*args, **kwargs):  # noqa: A001 - Triton's name
    """`tl.range(start, end, step, num_stages=...)`: a loop inside kernels."""
    import builtins
    return builtins.range(*args)


def static_range(*args, **kwargs):
    import builtins
    return builtins.range(*args)
