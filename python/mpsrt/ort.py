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
`precision` (`fp32` or `fp16`), `fusion` (`1`/`0`), `min_elements` (cost model;
`0` claims every supported group). Set `MPSRT_ORT_VERBOSE=1` to log which nodes the
provider claims; ORT's own placement log is `SessionOptions.log_severity_level = 1` (lines
"Node placements"). This module imports `onnxruntime` only inside its functions.
"""
from __future__ import annotations

import threading
from typing import Any, List

from . import _C

__all__ = ["get_library_path", "get_ep_name", "get_ep_names", "register", "unregister",
           "get_ep_devices", "device_memory_info", "ortvalue_from_numpy", "ortvalue_empty",
           "transfer_stats",
           "REGISTRATION_NAME", "MEMORY_VENDOR_ID"]

#: The name the library is registered under with onnxruntime.
REGISTRATION_NAME = "mpsrt"
_EP_NAME = "MpsrtExecutionProvider"
#: Vendor id of mpsrt device memory in onnxruntime's `OrtDevice` ("MPSR": a private id, so the
#: memory is never mistaken for another provider's memory on the same card).
MEMORY_VENDOR_ID = 0x4D505352
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



def device_memory_info(device: int = 0) -> Any:
    """onnxruntime's `OrtMemoryInfo` of mpsrt device memory on GPU `device` (for
    `OrtValue.ortvalue_from_shape_and_type(..., memory_info=...)`). Raises when the provider
    registered none (no GPU, or `MPSRT_ORT_DEVICE_MEMORY=0`)."""
    ort = _ort()
    for d in get_ep_devices():
        if dict(d.ep_metadata).get("mpsrt.device") == str(device):
            info = d.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
            if info is not None:
                return info
    raise RuntimeError(f"MpsrtExecutionProvider registered no device memory for GPU {device}")


def ortvalue_empty(shape, dtype, device: int = 0) -> Any:
    """An uninitialized `OrtValue` in mpsrt device memory (e.g. an IO-bound output)."""
    ort = _ort()
    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype,
                                                     memory_info=device_memory_info(device))


def ortvalue_from_numpy(array, device: int = 0) -> Any:
    """A copy of `array` in mpsrt device memory, for `IOBinding.bind_ortvalue_input`: a session
    whose first nodes run on MpsrtExecutionProvider then reads it without a host copy."""
    import numpy as np
    array = np.ascontiguousarray(array)
    v = ortvalue_empty(array.shape, array.dtype, device)
    v.update_inplace(array)
    return v


_STATS = ("host_to_device_bytes", "device_to_host_bytes", "device_to_device_bytes",
          "inputs_in_place", "inputs_copied", "outputs_on_device", "outputs_to_host",
          "outputs_adopted", "inputs_mirrored", "reads_mirrored")


def transfer_stats() -> dict:
    """Process-wide counters of the provider's data movement (bytes through its data transfer;
    fused-node inputs read in place from device memory or copied; outputs written on the device
    or to host memory, and of those on the device, how many were the engine's own result buffer
    handed to ORT without a copy; int64/float64 inputs in device memory taken from the host copy
    the data transfer kept when uploading them, with no read back; device-to-host copies answered
    from such a host copy, e.g. an int64 graph output). Differences between two calls show where a
    run's bytes went."""
    import ctypes
    f = ctypes.CDLL(get_library_path()).mpsrt_ort_stats
    f.restype = ctypes.c_size_t
    buf = (ctypes.c_uint64 * len(_STATS))()
    f(buf, len(_STATS))
    return dict(zip(_STATS, buf))
