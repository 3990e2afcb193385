"""Device and memory functions of `mpsrt.mps`."""
import gc

import pytest

import mpsrt


def test_compiled_and_counts():
    assert mpsrt.is_compiled_with_mps() is True
    assert isinstance(mpsrt.mps.is_available(), bool)
    assert mpsrt.mps.device_count() == (1 if mpsrt.mps.is_available() else 0) or \
        mpsrt.mps.device_count() >= 1


def test_device_selection_and_properties(gpu):
    mpsrt.mps.set_device(0)
    assert mpsrt.mps.current_device() == 0
    mpsrt.mps.set_device("mps:0")
    props = mpsrt.mps.get_device_properties()
    assert props.name == mpsrt.mps.get_device_name() and props.name
    assert props.backend in ("Vulkan", "Metal", "DX12", "GL")
    assert props.total_memory > 0
    assert props.max_compute_workgroups_per_dimension >= 65535
    assert props.max_storage_buffer_binding_size > 0
    with pytest.raises(ValueError):
        mpsrt.mps.set_device(mpsrt.mps.device_count())


def test_memory_statistics_move(gpu):
    mpsrt.mps.synchronize()
    gc.collect()
    mpsrt.mps.empty_cache()
    base = mpsrt.mps.memory_allocated()
    mpsrt.mps.reset_max_memory_allocated()
    x = mpsrt.zeros([1024, 1024], place=gpu)  # 4 MiB
    grown = mpsrt.mps.memory_allocated()
    assert grown >= base + 4 * 1024 * 1024
    assert mpsrt.mps.memory_reserved() >= grown
    assert mpsrt.mps.max_memory_allocated() >= grown
    del x
    gc.collect()
    mpsrt.mps.synchronize()
    assert mpsrt.mps.memory_allocated() <= grown - 4 * 1024 * 1024
    assert mpsrt.mps.max_memory_allocated() >= grown
    reserved = mpsrt.mps.memory_reserved()
    mpsrt.mps.empty_cache()
    assert mpsrt.mps.memory_reserved() < reserved
    mpsrt.mps.reset_max_memory_allocated()
    assert mpsrt.mps.max_memory_allocated() == mpsrt.mps.memory_allocated()
    stats = mpsrt.mps.memory_stats()
    assert {"allocated", "reserved", "peak_allocated", "cached", "limit"} <= set(stats)


def test_synchronize_and_seed(gpu):
    y = mpsrt.ones([100], place=gpu) * 3
    mpsrt.mps.synchronize()
    assert y.numpy().sum() == 300
    mpsrt.mps.manual_seed(7)
    a = mpsrt.randn([5], place=gpu).numpy()
    mpsrt.manual_seed(7)
    b = mpsrt.randn([5], place="cpu").numpy()
    assert (a == b).all()
