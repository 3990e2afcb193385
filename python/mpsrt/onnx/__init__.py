"""Running ONNX models with the mpsrt engine, through an onnxruntime-shaped API.

`InferenceSession` mirrors `onnxruntime.InferenceSession`: it takes the same constructor
arguments (`sess_options`, `providers`, `provider_options`), `get_inputs()` / `get_outputs()`
describe the graph as onnxruntime does (declared element types, symbolic dims by name, unknown
dims as `None`), and `run(output_names, input_feed, run_options=None)` takes and returns NumPy
arrays. The model is imported and compiled once; each distinct set of input shapes is
specialized once and cached.

>>> import numpy as np, mpsrt.onnx
>>> sess = mpsrt.onnx.InferenceSession("model.onnx", providers=["CUDAExecutionProvider",
...                                                             "CPUExecutionProvider"])  # doctest: +SKIP
>>> sess.get_providers()                                             # doctest: +SKIP
['CUDAExecutionProvider']
>>> [(i.name, i.shape, i.type) for i in sess.get_inputs()]          # doctest: +SKIP
[('x', ['batch', 3], 'tensor(float)')]
>>> (y,) = sess.run(None, {"x": np.ones((2, 3), np.float32)})       # doctest: +SKIP

`mpsrt.onnx.backend` (imported on first use; it needs the `onnx` package) plugs the engine into
ONNX's backend API and test runner. This module itself does not import `onnx` (nor
`onnxruntime`: options objects are duck-typed).
"""
from __future__ import annotations

import importlib
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _C
from .. import mps
from .._tensor import Tensor, to_tensor

__all__ = ["InferenceSession", "NodeArg", "supported_ops", "onnx_type", "CPU_PROVIDERS",
           "GPU_PROVIDERS", "get_available_providers"]

# NumPy dtype name → the element type string onnxruntime reports (`tensor(<this>)`), for every
# ONNX element type mpsrt can hold. int16/uint16 are held as int32 and uint32/uint64 as int64
# (the importer's widening): feeds of those types are widened, results narrowed back.
_ONNX_ELEM = {
    "bool": "bool",
    "uint8": "uint8",
    "int8": "int8",
    "uint16": "uint16",
    "int16": "int16",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float",
    "float64": "double",
}
# Types the GPU computes in natively: feeds of these go straight to the session's device (one
# upload); the others (int64, float64) stay on the CPU and the engine narrows them itself.
_GPU_NATIVE = {"bool", "uint8", "int8", "int32", "float16", "float32"}

#: The onnxruntime provider that runs on the CPU.
CPU_PROVIDERS = ("CPUExecutionProvider",)
#: onnxruntime provider names that run on the mpsrt GPU (`'mps'`): mpsrt's own names and the
#: GPU providers of onnxruntime, so that code written for those runs unchanged. A provider's
#: `device_id` option picks the GPU (`'mps:<device_id>'`); other options are ignored.
GPU_PROVIDERS = (
    "MpsrtExecutionProvider",
    "MPSExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "NvTensorRTRTXExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "WebGpuExecutionProvider",
)
# Other onnxruntime providers (NPUs, CPU libraries, remote): mpsrt has no counterpart, so like
# an onnxruntime build without them they are skipped with a warning.
_ORT_OTHER_PROVIDERS = (
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider",
    "QNNExecutionProvider", "NnapiExecutionProvider", "VSINPUExecutionProvider",
    "JsExecutionProvider", "RknpuExecutionProvider", "WebNNExecutionProvider",
    "XnnpackExecutionProvider", "CANNExecutionProvider", "AzureExecutionProvider",
    "ACLExecutionProvider", "ArmNNExecutionProvider", "SNPEExecutionProvider",
    "TvmExecutionProvider",
)
# Keyword arguments of onnxruntime's constructor that have no meaning here: accepted, ignored.
_ORT_KWARGS = {"enable_fallback", "read_config_from_model", "disabled_optimizers"}
# onnxruntime's `GraphOptimizationLevel` by name and value. Every level above ORT_DISABLE_ALL
# keeps mpsrt's fusion (elementwise chains, conv/GEMM epilogues: basic-level fusions in ORT).
_OPT_LEVELS = {"ORT_DISABLE_ALL": 0, "ORT_ENABLE_BASIC": 1, "ORT_ENABLE_EXTENDED": 2,
               "ORT_ENABLE_LAYOUT": 3, "ORT_ENABLE_ALL": 99}

Dim = Union[int, str, None]


def onnx_type(dtype: str) -> str:
    """onnxruntime's type string of a NumPy dtype name: `onnx_type('float32') == 'tensor(float)'`."""
    return f"tensor({_ONNX_ELEM[dtype]})"


def get_available_providers() -> List[str]:
    """The providers this machine can run, as `onnxruntime.get_available_providers()`: mpsrt's
    GPU provider first when a GPU adapter is available, then the CPU."""
    return (["MpsrtExecutionProvider"] if mps.is_available() else []) + ["CPUExecutionProvider"]


class NodeArg:
    """A graph input or output, as onnxruntime's `NodeArg`.

    `shape` holds ints for fixed dims, the `dim_param` name (str) for named dynamic dims and
    `None` for unnamed or uninferable dims; it is `[]` for scalars and when the rank is unknown
    too (an output whose rank neither the model nor shape inference gives), as in onnxruntime.
    `type` is an onnxruntime type string like `'tensor(float)'`; `dtype` is the NumPy dtype name
    of the model's element type (`'float32'`, `'uint16'`).
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


def _normalize_providers(providers: Any, provider_options: Any) -> List[Tuple[str, Dict[str, str]]]:
    """`providers` / `provider_options` as onnxruntime validates them → `[(name, options)]`.
    Unknown names raise ValueError (onnxruntime only warns; a typo here would silently change
    where the model runs)."""
    if providers is None:
        if provider_options is not None:
            raise ValueError("[onnx] 'provider_options' given without 'providers'")
        return []
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Sequence):
        raise ValueError("[onnx] 'providers' should be a sequence of names or (name, options) tuples")
    if provider_options is not None:
        if isinstance(provider_options, (str, bytes)) or not isinstance(provider_options, Sequence):
            raise ValueError("[onnx] 'provider_options' should be a sequence of dicts")
        if len(providers) != len(provider_options):
            raise ValueError("[onnx] 'providers' and 'provider_options' should be the same length "
                             "if both are given")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("[onnx] only provider names are supported in 'providers' when "
                             "'provider_options' is given")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("[onnx] 'provider_options' values must be dicts")
        pairs = list(zip(providers, provider_options))
    else:
        pairs = []
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                  and isinstance(p[1], dict)):
                pairs.append(p)
            else:
                raise ValueError(f"[onnx] 'providers' entries must be names or (name, dict) "
                                 f"tuples, got {p!r}")
    known = CPU_PROVIDERS + GPU_PROVIDERS
    out: List[Tuple[str, Dict[str, str]]] = []
    for name, options in pairs:
        if name not in known and name not in _ORT_OTHER_PROVIDERS:
            raise ValueError(f"[onnx] unknown execution provider {name!r}: mpsrt knows "
                             f"{', '.join(known)}")
        if any(name == n for n, _ in out):
            warnings.warn(f"[onnx] duplicate provider {name!r} ignored", stacklevel=3)
            continue
        out.append((name, {str(k): str(v) for k, v in options.items()}))
    return out


def _choose_provider(providers: List[Tuple[str, Dict[str, str]]]) -> Tuple[str, str]:
    """The first usable provider, in order → `(name, place)`. A GPU provider needs a GPU adapter
    (and its `device_id`, if given); unusable ones are skipped with a warning, and when none is
    left the CPU runs, as onnxruntime falls back to `CPUExecutionProvider`."""
    for name, options in providers:
        if name in CPU_PROVIDERS:
            return name, "cpu"
        if name in GPU_PROVIDERS:
            device = options.get("device_id")
            try:
                index = None if device is None else int(device)
            except ValueError:
                raise ValueError(f"[onnx] provider {name!r}: device_id must be an integer, "
                                 f"got {device!r}") from None
            if index is None and mps.is_available():
                return name, "mps"
            if index is not None and 0 <= index < mps.device_count():
                return name, f"mps:{index}"
            why = ("no GPU adapter is available" if not mps.is_available()
                   else f"device_id {index} is out of range ({mps.device_count()} GPU(s))")
        else:
            why = "mpsrt has no such provider"
        warnings.warn(f"[onnx] provider {name!r} is not available ({why}); trying the next one",
                      stacklevel=3)
    if providers:
        warnings.warn("[onnx] no requested provider is available; falling back to "
                      "CPUExecutionProvider", stacklevel=3)
    return "CPUExecutionProvider", "cpu"


def _session_flags(sess_options: Any) -> Tuple[bool, bool]:
    """`(fusion, memory_planning)` from an `onnxruntime.SessionOptions`-like object (any object
    with some of its attributes): `graph_optimization_level` ORT_DISABLE_ALL (0) turns fusion
    off, any higher level keeps it; `enable_mem_reuse` is liveness-based buffer reuse."""
    if sess_options is None:
        return True, True
    level = getattr(sess_options, "graph_optimization_level", None)
    fusion = True
    if level is not None:
        name = level if isinstance(level, str) else getattr(level, "name", None)
        if isinstance(name, str) and name.startswith("GraphOptimizationLevel."):
            name = name.rsplit(".", 1)[1]
        if isinstance(name, str) and name in _OPT_LEVELS:
            value = _OPT_LEVELS[name]
        else:
            try:
                value = int(level)
            except (TypeError, ValueError):
                raise ValueError(f"[onnx] unknown graph_optimization_level {level!r}: expected "
                                 f"one of {', '.join(_OPT_LEVELS)} or its value") from None
        fusion = value > 0
    return fusion, bool(getattr(sess_options, "enable_mem_reuse", True))


class InferenceSession:
    """An ONNX model loaded for one place, with onnxruntime's constructor:

    `InferenceSession(path_or_bytes, sess_options=None, providers=None, provider_options=None,
    *, place=None)`

    - `path_or_bytes`: a path (`str` / `os.PathLike`), the serialized model, or an
      `onnx.ModelProto`.
    - `providers`: onnxruntime provider names or `(name, options)` tuples in order of
      preference, with `provider_options` as onnxruntime's parallel list of dicts. The first
      usable one runs the whole model: `'CPUExecutionProvider'` the CPU, any of
      `GPU_PROVIDERS` (`'CUDAExecutionProvider'`, `'CoreMLExecutionProvider'`,
      `'MpsrtExecutionProvider'`, ...) the mpsrt GPU, on `device_id` if its options give one.
      A GPU provider without a GPU is skipped with a warning, as are onnxruntime providers mpsrt
      has no counterpart for (OpenVINO, DNNL, QNN, ...); when none is left the CPU runs. A name
      onnxruntime does not know raises ValueError. `None` or `[]`: the GPU when available, else
      the CPU. `get_providers()` reports the provider used.
    - `sess_options`: an `onnxruntime.SessionOptions` or any object with the same attributes
      (onnxruntime is not needed). `graph_optimization_level = ORT_DISABLE_ALL` compiles without
      fusion; `enable_mem_reuse = False` keeps every intermediate value alive; other attributes
      are ignored.
    - `place`: mpsrt's own choice (`'mps'`, `'mps:N'`, `'gpu'`, `'gpu:N'` or `'cpu'`); when
      given it wins over `providers`. (A string in place of `sess_options` is taken as `place`,
      as the former `InferenceSession(model, place)` signature did.)
    - `precision`: `'f32'` (default: as the model declares) or `'f16'`: a float32 model runs
      its heavy ops (conv, matmul, elementwise, pooling, data movement) in float16 with weights
      cast at load, softmax/normalizations/reductions/exp/log in float32; inputs and outputs
      keep their float32 types. Any other value raises ValueError naming the option.
    - onnxruntime's `enable_fallback`, `read_config_from_model` and `disabled_optimizers`
      keywords are accepted and ignored.

    Errors keep the engine's message and map to Python exceptions by kind: an unreadable file
    `OSError`, a malformed model or a wrong input name/shape `ValueError`, a wrong input dtype
    `TypeError`, an op the engine cannot run `NotImplementedError`.

    >>> sess = mpsrt.onnx.InferenceSession(model.SerializeToString(),
    ...                                    providers=["CPUExecutionProvider"])  # doctest: +SKIP
    >>> sess.run(["y"], {"x": np.zeros((4, 3), np.float32)})[0].shape            # doctest: +SKIP
    (4, 2)
    """

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: Any = None,
        providers: Optional[Sequence[Union[str, Tuple[str, Dict[Any, Any]]]]] = None,
        provider_options: Optional[Sequence[Dict[Any, Any]]] = None,
        *,
        place: Optional[str] = None,
        precision: str = "f32",
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - _ORT_KWARGS)
        if unknown:
            raise TypeError(f"[onnx] InferenceSession() got unexpected keyword argument(s) "
                            f"{', '.join(unknown)}")
        if isinstance(sess_options, str):
            if place is not None:
                raise TypeError("[onnx] place given twice (positionally and as place=)")
            place, sess_options = sess_options, None
        chosen = _normalize_providers(providers, provider_options)
        if place is not None:
            self._provider: Optional[str] = None
            self._provider_options: Dict[str, str] = {}
        elif chosen:
            self._provider, place = _choose_provider(chosen)
            self._provider_options = dict(chosen).get(self._provider, {})
        else:
            self._provider, self._provider_options = None, {}
            place = "mps" if mps.is_available() else "cpu"
        fusion, memory_planning = _session_flags(sess_options)
        self._sess = _C.OnnxSession(_model_source(path_or_bytes), str(place), fusion,
                                    memory_planning, str(precision))
        self._inputs = [NodeArg(name, dt, shape) for name, dt, _, shape in self._sess.inputs()]
        self._outputs = [NodeArg(name, dt, shape) for name, dt, _, shape in self._sess.outputs()]
        # name → (declared NumPy dtype, dtype the engine holds it in)
        self._input_dtype = {n: (d, s) for n, d, s, _ in self._sess.inputs()}
        self._output_dtype = {n: (d, s) for n, d, s, _ in self._sess.outputs()}

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
        """The provider the session runs on, as a one-element list: the name chosen from
        `providers` (`['CUDAExecutionProvider']`), else `'CPUExecutionProvider'` or
        `'MPSExecutionProvider'` after the place. (mpsrt runs the whole model on one place, so
        onnxruntime's trailing CPU fallback entry does not appear.)"""
        if self._provider is not None:
            return [self._provider]
        return ["CPUExecutionProvider" if self.place == "cpu" else "MPSExecutionProvider"]

    def get_provider_options(self) -> Dict[str, Dict[str, str]]:
        """`{provider: options}` of the provider in use, options as strings (onnxruntime's form)."""
        return {self.get_providers()[0]: dict(self._provider_options)}

    def _feed(self, name: str, value: Any) -> Any:
        """One feed → a `_C.Tensor` of the dtype the engine holds the input in. Arrays must have
        the input's declared dtype (TypeError naming the input, the expected and the given
        dtype otherwise, as onnxruntime's InvalidArgument); lists and Python scalars are
        converted to it, as onnxruntime does."""
        spec = self._input_dtype.get(name)
        if spec is None:
            raise ValueError(f"[onnx] unknown input {name!r}; the model's inputs are "
                             f"{list(self._input_dtype)}")
        declared, held = spec
        if isinstance(value, (list, tuple, int, float, bool)) and not isinstance(value, np.generic):
            arr = np.asarray(value, dtype=declared)
        else:
            arr = np.asarray(value)
        given = arr.dtype.name
        if given != declared:
            msg = (f"[onnx] input {name!r}: expected dtype {declared} ({onnx_type(declared)}), "
                   f"given {given}")
            if given in _ONNX_ELEM:
                msg += f" ({onnx_type(given)})"
            else:
                msg += (f", which mpsrt cannot hold; supported input dtypes are "
                        f"{', '.join(_ONNX_ELEM)}")
            raise TypeError(msg)
        if declared != held:
            if declared == "uint64" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
                # TypeError, as the engine's own "does not fit in int32" narrowing error.
                raise TypeError(f"[onnx] input {name!r}: uint64 value {int(arr.max())} does not "
                                f"fit in int64, which mpsrt holds uint64 values in")
            arr = arr.astype(held)
        place = self.place if held in _GPU_NATIVE else "cpu"
        return to_tensor(arr, dtype=held, place=place)._t

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """Runs the model on `{input name: array}` and returns NumPy arrays for `output_names`
        (all outputs in graph order when `None` or empty), each of the dtype the model declares
        (`NodeArg.dtype`). Feeds must have their input's declared dtype; see `_feed`.
        `run_options` (an `onnxruntime.RunOptions`-like object) is accepted for onnxruntime
        compatibility and ignored. The GIL is released while the engine runs."""
        del run_options
        if not isinstance(input_feed, Mapping):
            raise TypeError(f"[onnx] input_feed must be a dict, got {type(input_feed).__name__}")
        all_names = [o.name for o in self._outputs]
        names = list(output_names) if output_names else all_names
        unknown = [n for n in names if n not in all_names]
        if unknown:
            raise ValueError(f"[onnx] unknown output(s) {unknown}; the model's outputs are {all_names}")
        feeds = {str(k): self._feed(str(k), v) for k, v in input_feed.items()}
        results: Dict[str, Any] = dict(self._sess.run(feeds))
        out = []
        for n in names:
            arr = Tensor._wrap(results[n]).numpy()
            declared, held = self._output_dtype[n]
            out.append(arr.astype(declared) if declared != held else arr)
        return out

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
