//! Device and memory functions behind `mpsrt.mps`: counts, selection, properties,
//! synchronization and the caching allocator's statistics.

use crate::{IntoPy, PyRes};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn device_index(index: Option<usize>) -> usize {
    index.unwrap_or_else(mpsrt_runtime::current_device)
}

#[pyfunction]
fn device_count() -> usize {
    mpsrt_runtime::device_count()
}

#[pyfunction]
fn current_device() -> usize {
    mpsrt_runtime::current_device()
}

#[pyfunction]
fn set_current_device(index: usize) -> PyRes<()> {
    mpsrt_runtime::set_current_device(index).py_err()
}

/// The properties of GPU device `index` (default: current) as a dict.
#[pyfunction]
#[pyo3(signature = (index=None))]
fn device_properties<'py>(py: Python<'py>, index: Option<usize>) -> PyRes<Bound<'py, PyDict>> {
    let i = device_index(index);
    let dev = crate::guard::detach(py, "device_properties", move || mpsrt_runtime::gpu_device(i))
        .py_err()?;
    let p = dev.properties();
    let d = PyDict::new(py);
    d.set_item("index", p.index)?;
    d.set_item("name", &p.name)?;
    d.set_item("display_name", p.display_name())?;
    d.set_item("backend", &p.backend)?;
    d.set_item("device_type", &p.device_type)?;
    d.set_item("driver", &p.driver)?;
    d.set_item("vendor_id", p.vendor_id)?;
    d.set_item("device_id", p.device_id)?;
    d.set_item("total_memory", p.total_memory)?;
    d.set_item("total_memory_source", &p.total_memory_source)?;
    d.set_item("unified_memory", p.unified_memory)?;
    d.set_item("shader_f16", p.shader_f16)?;
    d.set_item("subgroups", p.subgroups)?;
    d.set_item("subgroup_min_size", p.subgroup_min_size)?;
    d.set_item("subgroup_max_size", p.subgroup_max_size)?;
    d.set_item("max_buffer_size", p.max_buffer_size)?;
    d.set_item("max_storage_buffer_binding_size", p.max_storage_buffer_binding_size)?;
    d.set_item("max_storage_buffers_per_shader_stage", p.max_storage_buffers_per_shader_stage)?;
    d.set_item("max_compute_workgroups_per_dimension", p.max_compute_workgroups_per_dimension)?;
    d.set_item("max_compute_invocations_per_workgroup", p.max_compute_invocations_per_workgroup)?;
    d.set_item("max_compute_workgroup_storage_size", p.max_compute_workgroup_storage_size)?;
    Ok(d)
}

/// Waits until every queued op on device `index` (default: current) has finished.
#[pyfunction]
#[pyo3(signature = (index=None))]
fn synchronize(py: Python<'_>, index: Option<usize>) -> PyRes<()> {
    let i = device_index(index);
    crate::guard::detach(py, "synchronize", move || mpsrt_runtime::gpu_device(i)?.synchronize())
        .py_err()
}

/// Memory statistics of device `index`: a dict with allocated, reserved, peak_allocated,
/// cached, alloc_count, cache_hits and limit (bytes).
#[pyfunction]
#[pyo3(signature = (index=None))]
fn memory_stats<'py>(py: Python<'py>, index: Option<usize>) -> PyRes<Bound<'py, PyDict>> {
    let i = device_index(index);
    let s = crate::guard::detach(py, "memory_stats", move || {
        mpsrt_runtime::gpu_device(i).map(|d| d.memory_stats())
    })
    .py_err()?;
    let d = PyDict::new(py);
    d.set_item("allocated", s.allocated)?;
    d.set_item("reserved", s.reserved)?;
    d.set_item("peak_allocated", s.peak_allocated)?;
    d.set_item("cached", s.cached)?;
    d.set_item("alloc_count", s.alloc_count)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("limit", s.limit)?;
    Ok(d)
}

/// Returns cached (unused) buffers of device `index` to the driver.
#[pyfunction]
#[pyo3(signature = (index=None))]
fn empty_cache(py: Python<'_>, index: Option<usize>) -> PyRes<()> {
    let i = device_index(index);
    crate::guard::detach(py, "empty_cache", move || {
        mpsrt_runtime::gpu_device(i).map(|d| d.empty_cache())
    })
    .py_err()
}

#[pyfunction]
#[pyo3(signature = (index=None))]
fn reset_peak_memory(py: Python<'_>, index: Option<usize>) -> PyRes<()> {
    let i = device_index(index);
    crate::guard::detach(py, "reset_peak_memory", move || {
        mpsrt_runtime::gpu_device(i).map(|d| d.reset_peak_memory())
    })
    .py_err()
}

/// Host memory of the CPU place: `{"allocated": live bytes, "limit": MPSRT_CPU_MEMORY_LIMIT}`.
#[pyfunction]
fn cpu_memory_stats(py: Python<'_>) -> PyRes<Bound<'_, PyDict>> {
    let (allocated, limit) = mpsrt_runtime::cpu_memory_usage();
    let d = PyDict::new(py);
    d.set_item("allocated", allocated)?;
    d.set_item("limit", limit)?;
    Ok(d)
}

/// Sets the CPU place's memory limit in bytes (`None`: the default, 90% of system RAM).
#[pyfunction]
#[pyo3(signature = (limit=None))]
fn set_cpu_memory_limit(limit: Option<u64>) {
    mpsrt_runtime::set_cpu_memory_limit(limit);
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(current_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_current_device, m)?)?;
    m.add_function(wrap_pyfunction!(device_properties, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(set_cpu_memory_limit, m)?)?;
    Ok(())
}
