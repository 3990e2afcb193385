"""The seed's ``paddle.mps`` API on real PaddlePaddle, backed by the mpsrt CustomDevice plugin.

``import mpsrt.paddle`` adds ``paddle.is_compiled_with_mps()`` and a ``paddle.mps`` module
(``is_available``, ``device_count``, ``set_device``, ``current_device``,
``get_device_properties``, ``get_device_name``, ``synchronize``, ``memory_allocated``,
``memory_reserved``, ``max_memory_allocated``, ``reset_max_memory_allocated``,
``empty_cache``) and lets ``paddle.randn(..., place='mps')`` name a place like
``paddle.to_tensor``. Paddle's behaviour for every other device is unchanged: nothing is
patched except ``paddle.randn`` / ``rand`` / ``zeros`` / ``ones`` / ``full``, which only
translate a ``place=`` keyword into Paddle's own ``device=``.

The plugin itself (``InitPlugin`` in ``mpsrt._C``, loaded by Paddle at ``import paddle``) is
what runs Paddle's kernels on the GPU; this module only reads its statistics through ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import sys
import types
from dataclasses import dataclass

import paddle

__all__ = ["plugin_library", "stats", "reset_stats", "last_error", "mps"]


@functools.lru_cache(maxsize=1)
def plugin_library() -> ctypes.CDLL | None:
    """The loaded plugin: ``mpsrt._C`` (the installed package) or a library Paddle loaded from
    ``CUSTOM_DEVICE_ROOT`` (e.g. the cargo-built ``libmpsrt_paddle.so``)."""
    candidates = []
    root = os.environ.get("CUSTOM_DEVICE_ROOT")
    if root and os.path.isdir(root):
        candidates += [os.path.join(root, f) for f in sorted(os.listdir(root)) if f.endswith(".so")]
    try:
        from . import _C

        candidates.append(_C.__file__)
    except ImportError:
        pass
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1)
    for path in candidates:
        try:
            lib = ctypes.CDLL(os.path.realpath(path), mode=mode)
        except OSError:
            continue  # not loaded in this process
        if hasattr(lib, "mpsrt_paddle_stats"):
            lib.mpsrt_paddle_stats.restype = ctypes.c_size_t
            lib.mpsrt_paddle_last_error.restype = ctypes.c_size_t
            lib.mpsrt_paddle_device_json.restype = ctypes.c_size_t
            return lib
    return None


def _string(fn, *args) -> str:
    n = fn(*args, None, 0)
    buf = ctypes.create_string_buffer(max(int(n), 1))
    fn(*args, buf, len(buf))
    return buf.value.decode()


def _lib() -> ctypes.CDLL:
    lib = plugin_library()
    if lib is None:
        raise RuntimeError(
            "the mpsrt Paddle plugin is not loaded: install mpsrt with pip (it puts a loader in "
            "<site-packages>/paddle_custom_device) or point CUSTOM_DEVICE_ROOT at the plugin"
        )
    return lib


def stats() -> dict:
    """Kernel launches per ``op/dtype`` on the device, how many of them the eager fast path
    replayed (``fast``), copies by direction, registered kernels."""
    return json.loads(_string(_lib().mpsrt_paddle_stats))


def reset_stats() -> None:
    _lib().mpsrt_paddle_reset_stats()


def last_error() -> str:
    """The last error a kernel or runtime call of the plugin reported."""
    return _string(_lib().mpsrt_paddle_last_error)


def _device(index: int | None = None) -> dict:
    i = current_device() if index is None else int(index)
    d = json.loads(_string(_lib().mpsrt_paddle_device_json, ctypes.c_int(i)))
    if "error" in d:
        raise RuntimeError(d["error"])
    return d


# ---- paddle.mps ----


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    if "mps" not in paddle.device.get_all_custom_device_type():
        return 0
    return int(paddle.base.core.get_custom_device_count("mps"))


def set_device(index: int = 0) -> None:
    paddle.device.set_device(f"mps:{int(index)}")


def current_device() -> int:
    d = paddle.device.get_device()
    return int(d.split(":")[1]) if d.startswith("mps:") else 0


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    backend: str
    device_type: str
    total_memory: int
    unified_memory: bool
    max_buffer_size: int


def get_device_properties(index: int | None = None) -> DeviceProperties:
    d = _device(index)
    return DeviceProperties(
        d["name"], d["backend"], d["device_type"], d["total_memory"], d["unified_memory"], d["max_buffer_size"]
    )


def get_device_name(index: int | None = None) -> str:
    return _device(index)["name"]


def synchronize(index: int | None = None) -> None:
    paddle.device.synchronize(f"mps:{current_device() if index is None else int(index)}")


def memory_allocated(index: int | None = None) -> int:
    """Bytes held by live Paddle tensors on the device (Paddle's own allocator statistic)."""
    i = current_device() if index is None else int(index)
    return int(paddle.base.core.device_memory_stat_current_value("Allocated", i))


def max_memory_allocated(index: int | None = None) -> int:
    i = current_device() if index is None else int(index)
    return int(paddle.base.core.device_memory_stat_peak_value("Allocated", i))


def reset_max_memory_allocated(index: int | None = None) -> None:
    i = current_device() if index is None else int(index)
    paddle.base.core.device_memory_stat_reset_peak_value("Allocated", i)


def memory_reserved(index: int | None = None) -> int:
    """Bytes of GPU buffers mpsrt holds for the device (Paddle's chunks plus its own cache)."""
    return int(_device(index)["reserved"])


def empty_cache() -> None:
    """Return Paddle's free chunks to mpsrt, then mpsrt's cached buffers to the driver."""
    paddle.base.core.device_empty_cache()
    _lib().mpsrt_paddle_empty_cache(ctypes.c_int(current_device()))


mps = types.ModuleType("paddle.mps", "mpsrt's MPS-style device API on real Paddle (see mpsrt.paddle).")
for _name in [
    "is_available",
    "device_count",
    "set_device",
    "current_device",
    "get_device_properties",
    "get_device_name",
    "synchronize",
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "reset_max_memory_allocated",
    "empty_cache",
    "stats",
    "reset_stats",
    "last_error",
]:
    setattr(mps, _name, globals()[_name])
mps.DeviceProperties = DeviceProperties


def _with_place(fn):
    """``fn(..., place='mps')`` → Paddle's ``device=`` keyword; everything else untouched."""

    @functools.wraps(fn)
    def wrapper(*args, place=None, **kwargs):
        if place is not None and "device" not in kwargs:
            kwargs["device"] = place
        return fn(*args, **kwargs)

    wrapper.__mpsrt_wrapped__ = fn
    return wrapper


def _install() -> None:
    if getattr(paddle, "mps", None) is mps:
        return
    paddle.mps = mps
    sys.modules["paddle.mps"] = mps
    paddle.is_compiled_with_mps = lambda: "mps" in paddle.device.get_all_custom_device_type()
    for name in ["randn", "rand", "zeros", "ones", "full"]:
        fn = getattr(paddle, name, None)
        if fn is not None and not hasattr(fn, "__mpsrt_wrapped__"):
            setattr(paddle, name, _with_place(fn))


_install()
