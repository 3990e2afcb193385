"""mpsrt as an ONNX Runtime plugin execution provider (onnxruntime >= 1.24).

Two lines give an existing onnxruntime program mpsrt's GPU path:

>>> import mpsrt.ort, onnxruntime as ort
>>> mpsrt.ort.register()                                              # doctest: +SKIP
>>> sess = ort.InferenceSession("model.onnx", providers=["MpsrtExecutionProvider",
...                                                      "CPUExecutionProvider"])  # doctest: +SKIP

or, choosing devices explicitly:

>>> so = ort.SessionOptions()                                         # doctest: +SKIP
>>> devs = [d for d in ort.get_ep_devices() if d.ep_name == mpsrt.ort.get_ep_name()]
>>> so.add_provider_for_devices(devs, {"fusion": "1"})                # doctest: +SKIP

The provider is compiled into mpsrt's own extension module (`mpsrt._C` exports
`CreateEpFactories` / `ReleaseEpFactory`), so onnxruntime and `import mpsrt` share one binary
and one GPU runtime in the process. Provider options: `device_id` (mpsrt GPU index, or `cpu`),
`precision` (`fp32`), `fusion` (`1`/`0`). Set `MPSRT_ORT_VERBOSE=1` to log which nodes the
provider claims; ORT's own placement log is `SessionOptions.log_severity_level = 1` (lines
"Node placements"). This module imports `onnxruntime` only inside its functions.
"""
from __future__ import annotations

import threading
from typing import Any, List

from . import _C

__all__ = ["get_library_path", "get_ep_name", "get_ep_names", "register", "unregister",
           "get_ep_devices", "REGISTRATION_NAME"]

#: The name the library is registered under with onnxruntime.
REGISTRATION_NAME = "mpsrt"
_EP_NAME = "MpsrtExecutionProvider"
_lock = threading.Lock()
_registered = False


def get_library_path() -> str:
    """Path of the shared library onnxruntime loads: mpsrt's extension module itself."""
    return _C.__file__


def get_ep_name() -> str:
    """The execution provider's name (`"MpsrtExecutionProvider"`)."""
    return _EP_NAME


def get_ep_names() -> List[str]:
    """All provider names the library creates (one)."""
    return [_EP_NAME]


def _ort() -> Any:
    import onnxruntime
    if not hasattr(onnxruntime, "register_execution_provider_library"):
        raise RuntimeError(
            f"onnxruntime {onnxruntime.__version__} has no plugin execution providers; "
            "MpsrtExecutionProvider needs onnxruntime >= 1.24")
    return onnxruntime


def _is_loaded(ort: Any) -> bool:
    return any(d.ep_name == _EP_NAME for d in ort.get_ep_devices())


def register(name: str = REGISTRATION_NAME) -> None:
    """Registers the provider with onnxruntime (idempotent: a second call does nothing).

    Afterwards `providers=["MpsrtExecutionProvider", "CPUExecutionProvider"]` and
    `SessionOptions.add_provider_for_devices(...)` select it."""
    global _registered
    ort = _ort()
    with _lock:
        if _registered and _is_loaded(ort):
            return
        if _is_loaded(ort):  # registered by someone else (e.g. directly with the path)
            _registered = True
            return
        ort.register_execution_provider_library(name, get_library_path())
        _registered = True


def unregister(name: str = REGISTRATION_NAME) -> None:
    """Unregisters the library (sessions already created keep working until released)."""
    global _registered
    ort = _ort()
    with _lock:
        if _registered:
            ort.unregister_execution_provider_library(name)
            _registered = False


def get_ep_devices() -> list:
    """onnxruntime's `OrtEpDevice`s of this provider (registers first)."""
    register()
    return [d for d in _ort().get_ep_devices() if d.ep_name == _EP_NAME]

