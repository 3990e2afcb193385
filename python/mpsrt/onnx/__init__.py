"""Running ONNX models with the mpsrt engine, through an onnxruntime-shaped API.

`InferenceSession` mirrors `onnxruntime.InferenceSession`: `get_inputs()` / `get_outputs()`
describe the graph, `run(output_names, feeds)` takes and returns NumPy arrays. The model is
imported and compiled once; each distinct set of input shapes is specialized once and cached.

>>> import numpy as np, mpsrt.onnx
>>> sess = mpsrt.onnx.InferenceSession("model.onnx", place="mps")   # doctest: +SKIP
>>> [(i.name, i.shape, i.type) for i in sess.get_inputs()]          # doctest: +SKIP
[('x', ['batch', 3], 'tensor(float)')]
>>> (y,) = sess.run(None, {"x": np.ones((2, 3), np.float32)})       # doctest: +SKIP

`mpsrt.onnx.backend` (imported on first use; it needs the `onnx` package) plugs the engine into
ONNX's backend API and test runner. This module itself does not import `onnx`.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from .. import _C
from .._tensor import Tensor, dtype_name, to_tensor

__all__ = ["InferenceSession", "NodeArg", "supported_ops", "onnx_type"]

# mpsrt dtype name → the element type string onnxruntime reports (`tensor(<this>)`).
_ONNX_ELEM = {
    "bool": "bool",
    "uint8": "uint8",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "float16": "float16",
    "float32": "float",
    "float64": "double",
}
# Types the GPU computes in natively: feeds of these go straight to the session's device (one
# upload); the others (int64, float64) stay on the CPU and the engine narrows them itself.
_GPU_NATIVE = {"bool", "uint8", "int8", "int32", "float16", "float32"}

Dim = Union[int, str, None]


def onnx_type(dtype: str) -> str:
    """onnxruntime's type string of an mpsrt dtype name: `onnx_type('float32') == 'tensor(float)'`."""
    return f"tensor({_ONNX_ELEM[dtype]})"


class NodeArg:
    """A graph input or output, as onnxruntime's `NodeArg`.

    `shape` holds ints for fixed dims, the `dim_param` name (str) for named dynamic dims and
    `None` for unnamed dynamic dims; `type` is an onnxruntime type string like `'tensor(float)'`;
    `dtype` is the mpsrt / NumPy dtype name (`'float32'`).
    """

    __slots__ = ("name", "shape", "type", "dtype")

    def __init__(self, name: str, dtype: str, shape: Sequence[Dim]) -> None:
        self.name = name
        self.dtype = dtype
        self.type = onnx_type(dtype)
        self.shape: List[Dim] = list(shape)

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _model_source(path_or_bytes: Any) -> Union[str, bytes]:
    """A path, serialized bytes, or an `onnx.ModelProto` (serialized here) → what `_C` loads."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes)
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return os.fspath(path_or_bytes)
    if hasattr(path_or_bytes, "SerializeToString"):
        return path_or_bytes.SerializeToString()
    raise TypeError(
        f"[onnx] expected a model path, bytes or onnx.ModelProto, got {type(path_or_bytes).__name__}"
    )


class InferenceSession:
    """An ONNX model loaded for one place (`'mps'`, `'mps:N'`, `'gpu'`, `'gpu:N'` or `'cpu'`).

    Errors keep the engine's message and map to Python exceptions by kind: an unreadable file
    `OSError`, a malformed model or a wrong input name/shape `ValueError`, a wrong input dtype
    `TypeError`, an op the engine cannot run `NotImplementedError`.

    >>> sess = mpsrt.onnx.InferenceSession(model.SerializeToString(), place="cpu")  # doctest: +SKIP
    >>> sess.run(["y"], {"x": np.zeros((4, 3), np.float32)})[0].shape            # doctest: +SKIP
    (4, 2)
    """

    def __init__(self, path_or_bytes: Any, place: str = "mps") -> None:
        self._sess = _C.OnnxSession(_model_source(path_or_bytes), str(place))
        self._inputs = [NodeArg(*io) for io in self._sess.inputs()]
        self._outputs = [NodeArg(*io) for io in self._sess.outputs()]
        self._input_dtype = {i.name: i.dtype for i in self._inputs}

    @property
    def place(self) -> str:
        """The canonical place the session runs on (`'cpu'` or `'mps:N'`)."""
        return self._sess.place

    def get_inputs(self) -> List[NodeArg]:
        """The graph inputs (initializers excluded), in graph order."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        """The graph outputs, in graph order."""
        return list(self._outputs)

    def get_providers(self) -> List[str]:
        """onnxruntime-style provider list naming the place the session runs on."""
        return ["CPUExecutionProvider" if self.place == "cpu" else "MPSExecutionProvider"]

    def _feed(self, name: str, value: Any) -> Any:
        arr = np.asarray(value)
        # An unsupported NumPy dtype (complex, uint16...) fails here with TypeError; a supported
        # one that differs from the model's is left to the engine, whose message names the input.
        dt = dtype_name(arr.dtype)
        place = self.place if dt in _GPU_NATIVE else "cpu"
        return to_tensor(arr, dtype=dt, place=place)._t

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """Runs the model on `{input name: array}` and returns NumPy arrays for `output_names`
        (all outputs in graph order when `None`). `run_options` is accepted for onnxruntime
        compatibility and ignored. The GIL is released while the engine runs."""
        del run_options
        if not isinstance(input_feed, Mapping):
            raise TypeError(f"[onnx] input_feed must be a dict, got {type(input_feed).__name__}")
        all_names = [o.name for o in self._outputs]
        names = all_names if output_names is None else list(output_names)
        unknown = [n for n in names if n not in all_names]
        if unknown:
            raise ValueError(f"[onnx] unknown output(s) {unknown}; the model's outputs are {all_names}")
        feeds = {str(k): self._feed(str(k), v) for k, v in input_feed.items()}
        results: Dict[str, Any] = dict(self._sess.run(feeds))
        return [Tensor._wrap(results[n]).numpy() for n in names]

    def __repr__(self) -> str:
        return (f"InferenceSession(place={self.place!r}, inputs={self._inputs!r}, "
                f"outputs={self._outputs!r})")


def supported_ops() -> List[str]:
    """The ONNX op types the engine can run, sorted."""
    return list(_C.onnx_supported_ops())


def __getattr__(name: str) -> Any:
    # `mpsrt.onnx.backend` needs the optional `onnx` package: import it only when asked for.
    # importlib, not `from . import backend`: the latter probes this very `__getattr__` first.
    if name == "backend":
        return importlib.import_module(f"{__name__}.backend")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
