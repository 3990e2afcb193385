"""`mpsrt.mps`: GPU devices (Metal on macOS, Vulkan elsewhere) in the style of `torch.mps` /
`paddle.mps`: availability, selection, properties, synchronization and memory statistics.

>>> if mpsrt.mps.is_available():
...     mpsrt.mps.set_device(0)
...     print(mpsrt.mps.get_device_name(), mpsrt.mps.memory_allocated())
"""
from __future__ import annotations

from types import SimpleNamespace

from . import _C


def is_available() -> bool:
    """True when at least one GPU adapter is usable (False with `MPSRT_DEVICE=cpu`)."""
    return _C.device_count() > 0


def device_count() -> int:
    return _C.device_count()


def _index(device) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    s = str(device)
    return int(s.split(":")[1]) if ":" in s else None


def set_device(device) -> None:
    """Selects the current GPU (`0`, `'mps:1'`); `'mps'` alone means the current one."""
    i = _index(device)
    if i is not None:
        _C.set_current_device(i)


def current_device() -> int:
    return _C.current_device()


def get_device_properties(device=None) -> SimpleNamespace:
    """Name, backend, device type, total_memory (bytes) and the adapter's limits."""
    return SimpleNamespace(**_C.device_properties(_index(device)))


def get_device_name(device=None) -> str:
    return _C.device_properties(_index(device))["name"]


def synchronize(device=None) -> None:
    """Blocks until every op queued on the device has finished (releases the GIL)."""
    _C.synchronize(_index(device))


def memory_stats(device=None) -> dict:
    """allocated, reserved, peak_allocated, cached, alloc_count, cache_hits, limit (bytes)."""
    return dict(_C.memory_stats(_index(device)))


def memory_allocated(device=None) -> int:
    """Bytes held by live GPU tensors (size-class rounded)."""
    return memory_stats(device)["allocated"]


def memory_reserved(device=None) -> int:
    """Bytes of GPU buffers held by the caching allocator (live + cached + in flight)."""
    return memory_stats(device)["reserved"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["peak_allocated"]


def reset_max_memory_allocated(device=None) -> None:
    _C.reset_peak_memory(_index(device))


reset_peak_memory_stats = reset_max_memory_allocated


def empty_cache(device=None) -> None:
    """Returns cached, unused GPU buffers to the driver (`memory_reserved` drops)."""
    _C.empty_cache(_index(device))


def manual_seed(seed: int) -> None:
    """Seeds `rand`/`randn` (one generator serves every place)."""
    _C.manual_seed(int(seed))


seed = manual_seed
