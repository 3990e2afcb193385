"""The Python `Tensor` class: a thin wrapper over `mpsrt._C.Tensor` adding NumPy conversion,
operators, indexing, DLPack and Paddle/PyTorch-style methods."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C

_NP = {
    "bool": np.bool_,
    "uint8": np.uint8,
    "int8": np.int8,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
}
_GPU_NARROW = {"float64": "float32", "int64": "int32"}


def dtype_name(dtype) -> str:
    """Normalizes a dtype given as a string, a NumPy dtype/type or `mpsrt.float32`-style name."""
    if dtype is None:
        raise TypeError("[dtype] dtype must not be None")
    if isinstance(dtype, str):
        name = dtype.replace("torch.", "").replace("paddle.", "")
        aliases = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
                   "long": "int64", "bool_": "bool"}
        name = aliases.get(name, name)
        if name not in _NP:
            raise TypeError(f"[dtype] unknown dtype {dtype!r}: expected one of {', '.join(_NP)}")
        return name
    if dtype is bool:
        return "bool"
    if dtype is int:
        return "int32"
    if dtype is float:
        return "float32"
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"[dtype] unknown dtype {dtype!r}") from None
    if name not in _NP:
        raise TypeError(f"[dtype] dtype {name} is not supported: expected one of {', '.join(_NP)}")
    return name


def resolve_place(place) -> str:
    """`None` → the default place; `'mps'` → `'mps:<current device>'`; validates the device."""
    if place is None:
        return _C.default_place()
    if isinstance(place, Tensor):
        return place.place
    return _C.canonical_place(str(place))


def _is_number(v) -> bool:
    return isinstance(v, (numbers.Number, np.generic)) and not isinstance(v, np.ndarray)


def to_tensor(data, dtype=None, place=None, stop_gradient=True) -> "Tensor":
    """Creates a tensor from a list, a scalar, a NumPy array or another tensor.

    Python floats become float32 and ints int32 (the GPU has no 64-bit types); NumPy arrays keep
    their dtype, except that float64/int64 arrays are narrowed to 32 bits on an `mps` place.

    >>> x = mpsrt.to_tensor([1.0, 2.0, 3.0], place='mps')
    >>> x.numpy()
    array([1., 2., 3.], dtype=float32)
    """
    p = resolve_place(place)
    if isinstance(data, Tensor):
        t = data if dtype is None else data.astype(dtype)
        return t.to(p)
    if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
        data = np.from_dlpack(data)
    from_numpy = isinstance(data, np.ndarray)
    arr = np.asarray(data)
    if dtype is not None:
        name = dtype_name(dtype)
    elif arr.dtype.kind == "f" and not from_numpy:
        name = "float32"
    elif arr.dtype.kind in "iu" and not from_numpy:
        name = "int32"
    elif arr.dtype.kind == "b":
        name = "bool"
    else:
        name = dtype_name(arr.dtype)
        if not p.startswith("cpu"):
            name = _GPU_NARROW.get(name, name)
    if dtype is None and name == "int32" and arr.dtype.kind in "iu" and arr.size \
            and (arr.min() < -2**31 or arr.max() >= 2**31):
        # An implicit narrowing (Python ints, or int64 on the GPU) must not wrap silently.
        raise OverflowError(
            f"[to_tensor] integer values {int(arr.min())}..{int(arr.max())} do not fit in int32, "
            f"the integer type of {p}; keep them on 'cpu' as int64 (dtype='int64') or convert "
            f"them explicitly")
    arr = np.asarray(arr, dtype=_NP[name])
    return Tensor._wrap(_C.from_bytes(arr.tobytes(), name, list(arr.shape), p))


def _as_operand(other, like: "Tensor"):
    """Tensor operands stay tensors, numbers stay numbers, arrays/lists become tensors."""
    if isinstance(other, Tensor):
        return other
    if isinstance(other, (bool, int, float)) or _is_number(other):
        return other.item() if isinstance(other, np.generic) else other
    if isinstance(other, (list, tuple, np.ndarray)):
        arr = np.asarray(other)
        dt = like.dtype if arr.dtype.kind == like_kind(like) else None
        return to_tensor(arr if dt is None else arr.astype(_NP[dt]), place=like.place)
    return NotImplemented


def like_kind(t: "Tensor") -> str:
    return np.dtype(_NP[t.dtype]).kind


def _binary(name: str, a: "Tensor", b, reverse: bool = False):
    b = _as_operand(b, a)
    if b is NotImplemented:
        return NotImplemented
    if isinstance(b, Tensor):
        x, y = (b, a) if reverse else (a, b)
        return Tensor._wrap(_C.binary(name, x._t, y._t))
    return Tensor._wrap(_C.binary_scalar(name, a._t, b, reverse))


class Tensor:
    """An n-dimensional array on the CPU (`place='cpu'`) or a GPU (`'mps:N'`).

    Tensors are values: ops return new tensors, views (reshape, transpose, slicing) share
    storage. Only GPU kernels launched with `@mpsrt.jit` write into an existing tensor.

    >>> x = mpsrt.ones([2, 3], place='mps')
    >>> (x * 2 + 1).numpy()
    array([[3., 3., 3.],
           [3., 3., 3.]], dtype=float32)
    """

    __slots__ = ("_t",)
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, place=None):
        self._t = to_tensor(data, dtype=dtype, place=place)._t

    @classmethod
    def _wrap(cls, t) -> "Tensor":
        obj = cls.__new__(cls)
        obj._t = t
        return obj

    # ---- attributes ----
    @property
    def shape(self) -> list:
        return list(self._t.shape)

    @property
    def dtype(self) -> str:
        return self._t.dtype

    @property
    def place(self) -> str:
        return self._t.place

    @property
    def device(self) -> str:
        """`'cpu'` or `'mps'` (device 0) / `'mps:N'`, comparable with strings like torch's."""
        p = self._t.place
        return "mps" if p == "mps:0" else p

    @property
    def ndim(self) -> int:
        return self._t.ndim

    @property
    def size(self) -> int:
        return self._t.numel()

    def numel(self) -> int:
        return self._t.numel()

    def dim(self) -> int:
        return self._t.ndim

    def stride(self, axis=None):
        s = self._t.strides
        return tuple(s) if axis is None else s[axis]

    def is_contiguous(self) -> bool:
        return self._t.is_contiguous()

    @property
    def T(self) -> "Tensor":
        return self.permute(list(range(self.ndim))[::-1])

    # ---- conversion ----
    def numpy(self) -> np.ndarray:
        """Copies the values to a new NumPy array (waits for the GPU)."""
        raw = self._t.to_bytes()
        return np.frombuffer(raw, dtype=_NP[self.dtype]).reshape(self.shape).copy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.size != 1:
            raise ValueError(f"[item] only one-element tensors can be converted, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        if self.dtype not in ("int32", "int64", "uint8", "int8"):
            raise TypeError("[index] only integer tensors can be used as an index")
        return int(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def to(self, place=None, dtype=None) -> "Tensor":
        """Copies to `place` ('cpu', 'mps', 'mps:N') and/or converts to `dtype`."""
        t = self
        if place is not None and dtype is None and not isinstance(place, (Tensor,)) \
                and str(place).split(":")[0].lower() not in ("cpu", "mps", "gpu"):
            place, dtype = None, place
        if dtype is not None:
            t = t.astype(dtype)
        if place is not None:
            t = Tensor._wrap(t._t.to(resolve_place(place)))
        return t

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def mps(self, index=None) -> "Tensor":
        return self.to("mps" if index is None else f"mps:{index}")

    cuda = mps

    def astype(self, dtype) -> "Tensor":
        return Tensor._wrap(self._t.astype(dtype_name(dtype)))

    def float(self):
        return self.astype("float32")

    def half(self):
        return self.astype("float16")

    def int(self):
        return self.astype("int32")

    def contiguous(self) -> "Tensor":
        return Tensor._wrap(self._t.contiguous())

    def clone(self) -> "Tensor":
        from . import _ops
        return _ops.assign(self)

    # ---- views ----
    def reshape(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        return Tensor._wrap(self._t.reshape([int(s) for s in shape]))

    view = reshape

    def permute(self, *perm) -> "Tensor":
        if len(perm) == 1 and isinstance(perm[0], (list, tuple)):
            perm = perm[0]
        return Tensor._wrap(self._t.permute([int(p) for p in perm]))

    def transpose(self, *axes) -> "Tensor":
        """`transpose(a, b)` swaps two axes (PyTorch); `transpose(perm)` permutes (Paddle)."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            return self.permute(axes[0])
        if len(axes) == 0:
            return self.T
        return Tensor._wrap(self._t.transpose(int(axes[0]), int(axes[1])))

    def unsqueeze(self, axis) -> "Tensor":
        return Tensor._wrap(self._t.unsqueeze(int(axis)))

    def squeeze(self, axis=None) -> "Tensor":
        return Tensor._wrap(self._t.squeeze(None if axis is None else int(axis)))

    def flatten(self, start_axis=0, stop_axis=-1) -> "Tensor":
        return Tensor._wrap(self._t.flatten(int(start_axis), int(stop_axis)))

    def expand(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        shape = list(shape)
        nd = len(shape)
        cur = [1] * (nd - self.ndim) + self.shape
        shape = [c if int(s) == -1 else int(s) for s, c in zip(shape, cur)]
        return Tensor._wrap(self._t.expand(shape))

    broadcast_to = expand

    def __getitem__(self, key) -> "Tensor":
        if not isinstance(key, tuple):
            key = (key,)
        if any(isinstance(k, (Tensor, np.ndarray, list)) for k in key):
            raise NotImplementedError("[getitem] indexing with tensors/arrays is not supported; "
                                      "use ints, slices, None and ...")
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise IndexError("[getitem] an index can only have a single ellipsis ('...')")
        if n_real > self.ndim:
            raise IndexError(f"[getitem] too many indices: tensor is {self.ndim}-dimensional, "
                             f"but {n_real} were indexed")
        t, ax = self._t, 0
        for k in key:
            if k is None:
                t = t.unsqueeze(ax)
                ax += 1
            elif k is Ellipsis:
                ax += self.ndim - n_real
            elif isinstance(k, slice):
                step = 1 if k.step is None else int(k.step)
                start = None if k.start is None else int(k.start)
                stop = None if k.stop is None else int(k.stop)
                t = t.slice(ax, start, stop, step)
                ax += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                size = t.shape[ax]
                if not -size <= int(k) < size:
                    raise IndexError(f"[getitem] index {int(k)} is out of bounds for axis {ax} "
                                     f"with size {size}")
                t = t.select(ax, int(k))
            else:
                raise TypeError(f"[getitem] unsupported index {k!r}")
        return Tensor._wrap(t)

    # ---- operators ----
    def __add__(self, o):
        return _binary("add", self, o)

    def __radd__(self, o):
        return _binary("add", self, o, True)

    def __sub__(self, o):
        return _binary("subtract", self, o)

    def __rsub__(self, o):
        return _binary("subtract", self, o, True)

    def __mul__(self, o):
        return _binary("multiply", self, o)

    def __rmul__(self, o):
        return _binary("multiply", self, o, True)

    def __truediv__(self, o):
        return _binary("divide", self, o)

    def __rtruediv__(self, o):
        return _binary("divide", self, o, True)

    def __pow__(self, o):
        return _binary("pow", self, o)

    def __rpow__(self, o):
        return _binary("pow", self, o, True)

    def __and__(self, o):
        return _binary("logical_and", self, o)

    __rand__ = __and__

    def __or__(self, o):
        return _binary("logical_or", self, o)

    __ror__ = __or__

    def __invert__(self):
        return Tensor._wrap(_C.unary("logical_not", self._t))

    def __matmul__(self, o):
        from . import _ops
        o = _as_operand(o, self)
        return NotImplemented if o is NotImplemented else _ops.matmul(self, o)

    def __rmatmul__(self, o):
        from . import _ops
        o = _as_operand(o, self)
        return NotImplemented if o is NotImplemented else _ops.matmul(o, self)

    def __neg__(self):
        return Tensor._wrap(_C.unary("neg", self._t))

    def __pos__(self):
        return self

    def __abs__(self):
        return Tensor._wrap(_C.unary("abs", self._t))

    def __eq__(self, o):
        return _binary("equal", self, o)

    def __ne__(self, o):
        return _binary("not_equal", self, o)

    def __lt__(self, o):
        return _binary("less", self, o)

    def __le__(self, o):
        return _binary("less_equal", self, o)

    def __gt__(self, o):
        return _binary("greater", self, o)

    def __ge__(self, o):
        return _binary("greater_equal", self, o)

    __hash__ = object.__hash__

    # ---- DLPack (CPU tensors) ----
    def __dlpack_device__(self):
        if not self.place.startswith("cpu"):
            raise BufferError("[dlpack] only CPU tensors can be exported; call .cpu() first")
        return (1, 0)

    def __dlpack__(self, stream=None, **kwargs):
        """Exports a CPU tensor through DLPack (the capsule owns a host copy of the values)."""
        self.__dlpack_device__()
        return self.numpy().__dlpack__(**({} if not kwargs.get("max_version") else
                                          {"max_version": kwargs["max_version"]}))

    # ---- printing ----
    def __repr__(self):
        vals = np.array2string(self.numpy(), separator=", ", prefix="       ")
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, place={self.place},\n       {vals})"

    __str__ = __repr__


def from_dlpack(obj) -> Tensor:
    """Imports any DLPack-capable CPU array (NumPy, another framework) as a CPU tensor."""
    return to_tensor(np.from_dlpack(obj), place="cpu")
