"""The Triton-language front end: `@mpsrt.jit`, `kernel[grid](...)`, `mpsrt.autotune`,
`mpsrt.Config` and raw WGSL kernels (`mpsrt.compile_kernel`).

The decorator keeps the function's module source; a launch builds the signature (tensors →
pointers with their dtype, Python ints/floats → runtime scalars, `tl.constexpr` parameters →
compile-time values) and hands everything to Rust, which compiles with `mpsrt-jit` (cached per
signature) and records the dispatch on the tensors' GPU command stream.

>>> @mpsrt.jit
... def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
...     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
...     tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n), mask=offs < n)
>>> out = mpsrt.empty_like(x)
>>> add_kernel[(mpsrt.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
"""
from __future__ import annotations

import inspect
import struct
import textwrap

from . import _C
from . import language as _tl
from ._tensor import Tensor

_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")


def cdiv(a: int, b: int) -> int:
    """Ceiling division: `cdiv(10, 4) == 3`."""
    return -(-int(a) // int(b))


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _is_constexpr(annotation) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if annotation is _tl.constexpr or isinstance(annotation, _tl.constexpr):
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr"


class JITFunction:
    """A kernel written in the Triton language. Launch with `kernel[grid](*args, **kwargs)`."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        self.constexprs = {p.name for p in self.params if _is_constexpr(p.annotation)}
        self._source = None
        # Launch-path binding without `inspect` (tens of microseconds a launch) for the usual
        # all-positional-or-keyword signature; anything unusual takes `Signature.bind_partial`.
        self._names = [p.name for p in self.params]
        self._simple = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in self.params)
        self._defaults = {p.name: p.default for p in self.params
                          if p.default is not inspect.Parameter.empty}

    @property
    def source(self) -> str:
        """The module source (so `@jit` helpers the kernel calls are compiled with it)."""
        if self._source is None:
            try:
                module = inspect.getmodule(self.fn)
                self._source = inspect.getsource(module) if module is not None else None
            except (OSError, TypeError):
                self._source = None
            if not self._source or f"def {self.__name__}" not in self._source:
                self._source = textwrap.dedent(inspect.getsource(self.fn))
        return self._source

    def _bind(self, args, kwargs):
        opts = {k: kwargs.pop(k) for k in list(kwargs)
                if k in _LAUNCH_OPTIONS and k not in self.signature.parameters}
        if self._simple and len(args) <= len(self._names):
            values = dict(zip(self._names, args))
            if all(k in self.signature.parameters for k in kwargs) and \
                    not any(k in values for k in kwargs):
                values.update(kwargs)
                for name, default in self._defaults.items():
                    values.setdefault(name, default)
                if len(values) == len(self._names):
                    return values, opts
        bound = self.signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        missing = [p.name for p in self.params if p.name not in bound.arguments]
        if missing:
            raise TypeError(f"[jit] {self.__name__}() missing arguments: {', '.join(missing)}")
        return dict(bound.arguments), opts

    def _spec(self, values: dict):
        spec = []
        for p in self.params:
            v = values[p.name]
            if p.name in self.constexprs:
                spec.append(("const", v.value if isinstance(v, _tl.constexpr) else v))
            elif isinstance(v, Tensor):
                spec.append(("ptr", v._t))
            elif isinstance(v, (bool, int, float)):
                spec.append(("scalar", v))
            elif hasattr(v, "item") and not hasattr(v, "__len__"):
                spec.append(("scalar", v.item()))
            else:
                raise TypeError(f"[jit] argument '{p.name}' of {self.__name__}: expected an mpsrt "
                                f"tensor or a Python number, got {type(v).__name__}")
        return spec

    def run(self, grid, args, kwargs):
        values, opts = self._bind(args, dict(kwargs))
        g = grid(dict(values, **opts)) if callable(grid) else grid
        if isinstance(g, int):
            g = (g,)
        g = tuple(int(x) for x in g) + (1,) * (3 - len(g))
        if len(g) != 3 or any(x < 0 for x in g):
            raise ValueError(f"[jit] grid must have 1 to 3 non-negative sizes, got {g}")
        nw = opts.get("num_warps")
        _C.jit_launch(self.source, self.__name__, self._spec(values), g,
                      None if nw is None else int(nw))

    def compile(self, *args, **kwargs) -> str:
        """The WGSL this kernel compiles to for these arguments (for inspection)."""
        values, _ = self._bind(args, dict(kwargs))
        return _C.jit_compile(self.source, self.__name__, self._spec(values))[0]

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"[jit] {self.__name__} is a kernel: launch it as "
                           f"{self.__name__}[grid](...)")


def jit(fn=None, **options):
    """Decorator marking a Triton-language kernel (`@mpsrt.jit` or `@mpsrt.jit(...)`)."""
    if fn is None:
        return lambda f: JITFunction(f)
    return JITFunction(fn)


class Config:
    """One autotuning configuration: meta-parameters plus `num_warps` / `num_stages`."""

    def __init__(self, kwargs, num_warps=4, num_stages=2, num_ctas=1, pre_hook=None, **extra):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.pre_hook = pre_hook

    def __repr__(self):
        return f"Config({self.kwargs}, num_warps={self.num_warps}, num_stages={self.num_stages})"


class Autotuner:
    """`@mpsrt.autotune(configs=[...], key=[...])`. This implementation does not benchmark:
    it always launches with the **first** config (an honest, deterministic default)."""

    def __init__(self, fn: JITFunction, configs, key, **kwargs):
        self.fn = fn
        self.configs = list(configs)
        self.key = key
        self.__name__ = fn.__name__
        self.best_config = self.configs[0] if self.configs else None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            cfg = self.best_config
            if cfg is not None:
                kwargs = {**cfg.kwargs, **kwargs}
                if "num_stages" in self.fn.constexprs:
                    kwargs.setdefault("num_stages", cfg.num_stages)
                kwargs.setdefault("num_warps", cfg.num_warps)
            return self.fn.run(grid, args, kwargs)
        return launch


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
             warmup=None, rep=None, **kwargs):
    """Triton's autotune decorator; always uses the first config (see `Autotuner`)."""
    return lambda fn: Autotuner(fn, configs, key)


def heuristics(values: dict):
    """`@mpsrt.heuristics({'NAME': lambda args: ...})`: computes constexprs from the arguments."""
    def wrap(fn):
        inner = fn

        class _H:
            __name__ = getattr(fn, "__name__", "kernel")

            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    jf = inner.fn if isinstance(inner, Autotuner) else inner
                    bound, _ = jf._bind(args, {k: v for k, v in kwargs.items()
                                               if k not in values})
                    for k, f in values.items():
                        kwargs.setdefault(k, f(bound))
                    return inner[grid](*args, **kwargs)
                return launch
        return _H()
    return wrap


class WgslKernel:
    """A raw WGSL compute kernel: tensors bind as storage buffers `0..n` (group 0) in argument
    order; `uniforms` (bytes, or numbers packed as 4-byte words: int → i32, float → f32) bind as
    a uniform buffer at binding `n`. `grid` is the workgroup count (x, y, z)."""

    def __init__(self, source: str, entry: str):
        self.source = source
        self.entry = entry

    def __call__(self, *tensors, grid, uniforms=None):
        meta = b""
        if isinstance(uniforms, (bytes, bytearray)):
            meta = bytes(uniforms)
        elif uniforms is not None:
            meta = b"".join(struct.pack("<f", u) if isinstance(u, float) else
                            struct.pack("<I", u & 0xFFFFFFFF) for u in uniforms)
        if meta:
            meta += b"\0" * (-len(meta) % 16)
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        g = tuple(int(x) for x in g) + (1,) * (3 - len(g))
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"[compile_kernel] arguments must be tensors, got {type(t).__name__}")
        _C.wgsl_launch(self.source, self.entry, [t._t for t in tensors], meta, g)


def compile_kernel(source: str, entry: str = "main") -> WgslKernel:
    """Raw WGSL kernel (like `torch.mps.compile_shader`); compiled on first launch, cached.

    >>> k = mpsrt.compile_kernel(src, "double")
    >>> k(x, out, grid=(mpsrt.cdiv(n, 64),))
    """
    return WgslKernel(source, entry)
