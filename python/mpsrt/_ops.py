"""Functions over tensors under Paddle/PyTorch names. Table-driven: adding an op that
`mpsrt._C` exposes is one entry in `_UNARY` / `_BINARY` (or a small wrapper below)."""
from __future__ import annotations

import numpy as np

from . import _C
from ._tensor import Tensor, _binary, _is_number, dtype_name, resolve_place, to_tensor


def _shape(shape) -> list:
    if isinstance(shape, (int, np.integer)):
        return [int(shape)]
    if isinstance(shape, Tensor):
        shape = shape.tolist()
    return [int(s) for s in shape]


def _default_float(dtype) -> str:
    return "float32" if dtype is None else dtype_name(dtype)


# ---- creation ----
def full(shape, fill_value, dtype=None, place=None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (dtype from the value when not given)."""
    if dtype is None:
        dtype = "bool" if isinstance(fill_value, bool) else \
            "int32" if isinstance(fill_value, (int, np.integer)) else "float32"
    return Tensor._wrap(_C.full(_shape(shape), fill_value, dtype_name(dtype), resolve_place(place)))


def zeros(shape, dtype=None, place=None) -> Tensor:
    """>>> mpsrt.zeros([2, 3], place='mps').numpy().sum()
    0.0"""
    return Tensor._wrap(_C.full(_shape(shape), 0, _default_float(dtype), resolve_place(place)))


def ones(shape, dtype=None, place=None) -> Tensor:
    return Tensor._wrap(_C.full(_shape(shape), 1, _default_float(dtype), resolve_place(place)))


def _like(x: Tensor, dtype, place):
    return (x.dtype if dtype is None else dtype, x.place if place is None else place)


def zeros_like(x: Tensor, dtype=None, place=None) -> Tensor:
    d, p = _like(x, dtype, place)
    return zeros(x.shape, d, p)


def ones_like(x: Tensor, dtype=None, place=None) -> Tensor:
    d, p = _like(x, dtype, place)
    return ones(x.shape, d, p)


def full_like(x: Tensor, fill_value, dtype=None, place=None) -> Tensor:
    d, p = _like(x, dtype, place)
    return full(x.shape, fill_value, d, p)


def empty(shape, dtype=None, place=None, device=None) -> Tensor:
    """A new tensor with its own, uninitialised storage (like `torch.empty`: no fill pass on
    the GPU), e.g. the output of a `@jit` kernel; zeros on the CPU. `device=` is accepted as an
    alias of `place=` (PyTorch style)."""
    place = place if place is not None else device
    return Tensor._wrap(_C.empty(_shape(shape), _default_float(dtype), resolve_place(place)))


def empty_like(x: Tensor, dtype=None, place=None) -> Tensor:
    """A new uninitialised tensor with `x`'s shape, dtype and place (see `empty`)."""
    d, p = _like(x, dtype, place)
    return empty(x.shape, d, p)


def arange(start=0, end=None, step=1, dtype=None, place=None) -> Tensor:
    """`[start, end)` by `step` like `numpy.arange` (int32 for int arguments, else float32)."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = "int32" if ints else "float32"
    return Tensor._wrap(_C.arange(float(start), float(end), float(step), dtype_name(dtype),
                                  resolve_place(place)))


def rand(shape, dtype=None, place=None) -> Tensor:
    """Uniform samples in [0, 1); reproducible with `mpsrt.mps.manual_seed`."""
    return Tensor._wrap(_C.rand(_shape(shape), _default_float(dtype), resolve_place(place)))


def randn(shape, dtype=None, place=None) -> Tensor:
    """Standard normal samples.

    >>> x = mpsrt.randn([2, 3], dtype='float32', place='mps')
    """
    return Tensor._wrap(_C.randn(_shape(shape), _default_float(dtype), resolve_place(place)))


def manual_seed(seed: int) -> None:
    """Reseeds the generator of `rand`/`randn` (shared by all places)."""
    _C.manual_seed(int(seed))


seed = manual_seed


# ---- elementwise ----
def _t(x, like=None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return to_tensor(x, place=None if like is None else like.place)


# The generated functions take Paddle's trailing `name=None` (unused), so the op is `op`.
def _unary(op):
    def f(x, name=None):
        return Tensor._wrap(_C.unary(op, _t(x)._t))
    f.__name__ = op
    f.__doc__ = f"Elementwise `{op}` (see the Rust `mpsrt_tensor::{op}`)."
    return f


def _bin(op):
    def f(x, y, name=None):
        if isinstance(x, Tensor):
            return _binary(op, x, y)
        if isinstance(y, Tensor):
            if _is_number(x) and op not in _NO_REFLECT:
                return _binary(op, y, x, True)
            return _binary(op, _t(x, y), y)
        return _binary(op, _t(x), y)
    f.__name__ = op
    f.__doc__ = f"Elementwise `{op}` with NumPy broadcasting; either side may be a Python number."
    return f


_NO_REFLECT = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
_UNARY = ["exp", "log", "sqrt", "sigmoid", "tanh", "erf", "sin", "cos", "reciprocal", "neg",
          "abs", "sign", "relu", "floor", "ceil", "round", "logical_not", "isnan", "silu",
          "hardswish"]
_BINARY = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "logical_and",
           "logical_or", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]

_funcs = {n: _unary(n) for n in _UNARY}
_funcs.update({n: _bin(n) for n in _BINARY})
# PyTorch / Paddle aliases.
_ALIASES = {"negative": "neg", "sub": "subtract", "mul": "multiply", "div": "divide",
            "true_divide": "divide", "eq": "equal", "ne": "not_equal", "lt": "less",
            "le": "less_equal", "gt": "greater", "ge": "greater_equal", "less_than": "less",
            "greater_than": "greater", "absolute": "abs", "rsqrt_": None}
for _a, _n in _ALIASES.items():
    if _n is not None:
        _funcs[_a] = _funcs[_n]
globals().update(_funcs)


def rsqrt(x) -> Tensor:
    return _funcs["reciprocal"](_funcs["sqrt"](x))


def square(x) -> Tensor:
    x = _t(x)
    return x * x


def clip(x, min=None, max=None) -> Tensor:
    """Clamps into [min, max] (either bound optional); keeps the dtype."""
    return Tensor._wrap(_C.clip(_t(x)._t, None if min is None else float(min),
                                None if max is None else float(max)))


clamp = clip


def where(condition, x, y) -> Tensor:
    """Elements of `x` where `condition` is true, else of `y` (tensors or numbers; broadcast)."""
    c = _t(condition)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        dt = "float32" if isinstance(x, float) or isinstance(y, float) else "int32"
        return Tensor._wrap(_C.where_scalar(c._t, x, y, dt))
    like = x if isinstance(x, Tensor) else y
    x = x if isinstance(x, Tensor) else full([], x, like.dtype, like.place)
    y = y if isinstance(y, Tensor) else full([], y, like.dtype, like.place)
    return Tensor._wrap(_C.where_(c._t, x._t, y._t))


def assign(x) -> Tensor:
    """A copy with its own storage."""
    x = _t(x)
    return x + zeros([], x.dtype, x.place) if x.dtype != "bool" else x | False


def cast(x, dtype) -> Tensor:
    return _t(x).astype(dtype)


def reshape(x, shape) -> Tensor:
    return _t(x).reshape(shape)


def transpose(x, perm) -> Tensor:
    """Paddle's `transpose(x, perm)`; PyTorch's `transpose(x, a, b)` is `x.transpose(a, b)`."""
    return _t(x).permute(perm)


def permute(x, perm) -> Tensor:
    return _t(x).permute(perm)


def unsqueeze(x, axis) -> Tensor:
    return _t(x).unsqueeze(axis)


def squeeze(x, axis=None) -> Tensor:
    return _t(x).squeeze(axis)


def flatten(x, start_axis=0, stop_axis=-1) -> Tensor:
    return _t(x).flatten(start_axis, stop_axis)


def expand(x, shape) -> Tensor:
    return _t(x).expand(shape)


broadcast_to = expand


def matmul(x, y) -> Tensor:
    """Matrix product (`x @ y`) with NumPy's batching rules (the tiled GPU GEMM; SGEMM on CPU)."""
    x, y = _t(x), _t(y)
    return Tensor._wrap(_C.matmul(x._t, y._t))


# Methods `x.exp()`, `x.add(y)`, ... for every function above.
for _n, _f in list(_funcs.items()):
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _f)
for _n, _f in {"clip": clip, "clamp": clip, "rsqrt": rsqrt, "square": square,
               "matmul": matmul, "cast": cast}.items():
    setattr(Tensor, _n, _f)


# ---- reductions (Paddle: axis/keepdim; PyTorch: dim/keepdim) ----
def _axes(axis, dim):
    a = axis if axis is not None else dim
    if a is None:
        return None
    return [int(v) for v in a] if isinstance(a, (list, tuple)) else [int(a)]


def _reducer(op):
    def f(x, axis=None, keepdim=False, dtype=None, name=None, dim=None):
        out = Tensor._wrap(_C.reduce(op, _t(x)._t, _axes(axis, dim), bool(keepdim)))
        return out if dtype is None else out.astype(dtype)
    f.__name__ = op
    f.__doc__ = (f"`{op}` over `axis` (an int, a list, or None for all) keeping reduced dims "
                 f"when `keepdim`.\n\n>>> mpsrt.{op}(mpsrt.ones([2, 3]), axis=1)")
    return f


def _arg(op):
    def f(x, axis=None, keepdim=False, dtype=None, name=None, dim=None):
        a = axis if axis is not None else dim
        out = Tensor._wrap(_C.reduce_arg(op, _t(x)._t, None if a is None else int(a),
                                         bool(keepdim)))
        return out if dtype is None else out.astype(dtype)
    f.__name__ = op
    f.__doc__ = (f"Index of the `{op[3:]}` along `axis` (flattened when None); int32 unless "
                 f"`dtype` asks otherwise (Paddle's default is int64, which the GPU lacks).")
    return f


def _sum(x, axis=None, dtype=None, keepdim=False, name=None, dim=None):
    """Sum over `axis` (an int, a list, or None for all); Paddle's argument order
    (`dtype` before `keepdim`)."""
    out = Tensor._wrap(_C.reduce("sum", _t(x)._t, _axes(axis, dim), bool(keepdim)))
    return out if dtype is None else out.astype(dtype)


def _norm(x, p=None, axis=None, keepdim=False, name=None, dim=None):
    """Vector p-norm over `axis` (all elements when None): `p` None, 2 or 'fro' is the
    library's L2 reduction; 1, inf, -inf, 0 and other numbers compose abs/pow/sum/max/min."""
    x = _t(x)
    axes = _axes(axis, dim)
    if p is None or p == "fro" or p == 2:
        return Tensor._wrap(_C.reduce("norm", x._t, axes, bool(keepdim)))
    if isinstance(p, str):
        raise NotImplementedError(f"[norm] p={p!r}: only vector norms (numbers, 'fro') are "
                                  f"supported")
    a = _funcs["abs"](x)
    red = lambda op, t: Tensor._wrap(_C.reduce(op, t._t, axes, bool(keepdim)))  # noqa: E731
    p = float(p)
    if p == float("inf"):
        return red("max", a)
    if p == float("-inf"):
        return red("min", a)
    if p == 0:
        return red("sum", (x != 0).astype(x.dtype if x.dtype != "bool" else "float32"))
    if p == 1:
        return red("sum", a)
    return red("sum", a ** p) ** (1.0 / p)


def var(x, axis=None, unbiased=True, keepdim=False, name=None, dim=None, correction=None):
    """Variance (`unbiased` → ddof 1; `correction` overrides)."""
    c = float(correction if correction is not None else (1.0 if unbiased else 0.0))
    return Tensor._wrap(_C.moment("var", _t(x)._t, _axes(axis, dim), c, bool(keepdim)))


def std(x, axis=None, unbiased=True, keepdim=False, name=None, dim=None, correction=None):
    """Standard deviation (`unbiased` → ddof 1; `correction` overrides)."""
    c = float(correction if correction is not None else (1.0 if unbiased else 0.0))
    return Tensor._wrap(_C.moment("std", _t(x)._t, _axes(axis, dim), c, bool(keepdim)))


def softmax(x, axis=-1, dtype=None, name=None, dim=None):
    """exp(x) / sum(exp(x)) along `axis` (stable)."""
    a = axis if dim is None else dim
    out = Tensor._wrap(_C.axis_op("softmax", _t(x)._t, int(a)))
    return out if dtype is None else out.astype(dtype)


def log_softmax(x, axis=-1, dtype=None, name=None, dim=None):
    a = axis if dim is None else dim
    out = Tensor._wrap(_C.axis_op("log_softmax", _t(x)._t, int(a)))
    return out if dtype is None else out.astype(dtype)


_REDUCTIONS = {n: _reducer(n) for n in ["mean", "prod", "max", "min", "logsumexp"]}
_sum.__name__, _norm.__name__ = "sum", "norm"  # module-level `sum` would shadow the builtin
_REDUCTIONS.update({"sum": _sum, "norm": _norm})
_REDUCTIONS.update({n: _arg(n) for n in ["argmax", "argmin"]})
_REDUCTIONS.update({"var": var, "std": std, "amax": _REDUCTIONS["max"],
                    "amin": _REDUCTIONS["min"], "softmax": softmax, "log_softmax": log_softmax})
for _n, _f in _REDUCTIONS.items():
    setattr(Tensor, _n, _f)
_funcs.update(_REDUCTIONS)


# ---- joining, splitting, indexing (Paddle names and arguments) ----
def _tensors(xs, op) -> list:
    if isinstance(xs, Tensor) or not isinstance(xs, (list, tuple)):
        raise TypeError(f"[{op}] expects a list or tuple of tensors, got {type(xs).__name__}")
    ts = [_t(v) for v in xs]
    return [t._t for t in ts]


def concat(x, axis=0, name=None) -> Tensor:
    """Joins a list of tensors along an existing `axis` (dtypes promote).

    >>> mpsrt.concat([mpsrt.ones([2, 3]), mpsrt.zeros([1, 3])], axis=0).shape
    [3, 3]"""
    return Tensor._wrap(_C.concat(_tensors(x, "concat"), int(axis)))


cat = concat  # PyTorch's name


def stack(x, axis=0, name=None) -> Tensor:
    """Joins equal-shaped tensors along a new `axis`."""
    return Tensor._wrap(_C.stack(_tensors(x, "stack"), int(axis)))


def split(x, num_or_sections, axis=0, name=None) -> list:
    """Splits `x` along `axis` into views: `num_or_sections` is a count of equal parts (which
    must divide the dim, as in Paddle) or a list of sizes, one of which may be -1 (the rest)."""
    x = _t(x)
    axis = int(axis)
    n = x.shape[axis] if -x.ndim <= axis < x.ndim else None
    if isinstance(num_or_sections, (int, np.integer)):
        k = int(num_or_sections)
        if n is not None and k > 0 and n % k != 0:
            raise ValueError(f"[split] dim {axis} of {x.shape} ({n}) is not divisible into "
                             f"{k} equal sections; pass a list of sizes instead")
        return [Tensor._wrap(t) for t in _C.split_into(x._t, max(k, 0), axis)]
    sizes = [int(s) for s in num_or_sections]
    if sizes.count(-1) > 1:
        raise ValueError(f"[split] at most one section may be -1, got {sizes}")
    if -1 in sizes and n is not None:
        sizes[sizes.index(-1)] = n - sum(s for s in sizes if s != -1)
    if any(s < 0 for s in sizes):
        raise ValueError(f"[split] section sizes must be non-negative, got {num_or_sections} "
                         f"for dim {axis} of {x.shape}")
    return [Tensor._wrap(t) for t in _C.split(x._t, sizes, axis)]


def chunk(x, chunks, axis=0, name=None) -> list:
    """`chunks` equal parts along `axis` (Paddle's `chunk`: the dim must divide evenly)."""
    return split(x, chunks, axis)


def _index(index) -> Tensor:
    """Index tensors as given; lists and arrays become int64 on the CPU (the library reads
    indices on the host wherever they live)."""
    if isinstance(index, Tensor):
        return index
    return to_tensor(np.asarray(index, dtype=np.int64), place="cpu")


def gather(x, index, axis=None, name=None) -> Tensor:
    """Entries of `x` at `index` (int32/int64, any rank; negative counts from the end) along
    `axis` (default 0): `out.shape = x.shape[:axis] + index.shape + x.shape[axis+1:]`."""
    x = _t(x)
    return Tensor._wrap(_C.gather(x._t, _index(index)._t, 0 if axis is None else int(axis)))


def index_select(x, index, axis=0, name=None) -> Tensor:
    """Entries of `x` at the 1-D `index` along `axis`."""
    x = _t(x)
    return Tensor._wrap(_C.index_select(x._t, int(axis), _index(index)._t))


def tile(x, repeat_times, name=None) -> Tensor:
    """Repeats `x` `repeat_times[d]` times along each dim (leading dims added as needed)."""
    reps = [int(repeat_times)] if isinstance(repeat_times, (int, np.integer)) \
        else [int(r) for r in repeat_times]
    return Tensor._wrap(_C.tile(_t(x)._t, reps))


def addmm(input, x, y, beta=1.0, alpha=1.0, name=None) -> Tensor:
    """`beta * input + alpha * (x @ y)` for 2-D `x`, `y`; `input` broadcasts to the product."""
    x, y = _t(x), _t(y)
    return Tensor._wrap(_C.addmm(_t(input, x)._t, x._t, y._t, float(beta), float(alpha)))


for _n, _f in {"split": split, "chunk": chunk, "tile": tile, "gather": gather,
               "index_select": index_select}.items():
    setattr(Tensor, _n, _f)
