//! Kernel launches from Python: Triton-language `@mpsrt.jit` kernels compiled by `mpsrt-jit`,
//! and raw WGSL (`mpsrt.compile_kernel`). Both are recorded on the device's command stream like
//! every other op, so they are ordered with eager ops without extra synchronization. A kernel
//! writes into the storage buffer of the output tensors it is given (`mpsrt.empty_like`), which
//! later reads of those tensors observe.

use crate::tensor::PyTensor;
use crate::{IntoPy, PyRes};
use mpsrt_core::{DType, Error, Result};
use mpsrt_jit::{
    ArgSpec, CompileOptions, CompiledKernel, ConstValue, KernelSignature, UniformKind,
};
use mpsrt_runtime::{Binding, GpuDevice, Kernel, Pipeline, Storage};
use mpsrt_tensor::Tensor;
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One launch argument after conversion from Python.
#[derive(Clone)]
enum Arg {
    Ptr(Tensor),
    Int(i64),
    Float(f64),
    Bool(bool),
    Const(ConstValue),
}

type CompileCache = Mutex<HashMap<String, Arc<CompiledKernel>>>;
type PipelineCache = Mutex<HashMap<(String, usize), Arc<Pipeline>>>;

fn compiled_cache() -> &'static CompileCache {
    static C: OnceLock<CompileCache> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn pipeline_cache() -> &'static PipelineCache {
    static C: OnceLock<PipelineCache> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn const_value(v: &Bound<'_, PyAny>) -> PyRes<ConstValue> {
    if v.is_none() {
        Ok(ConstValue::None)
    } else if v.is_instance_of::<PyBool>() {
        Ok(ConstValue::Bool(v.extract()?))
    } else if v.is_instance_of::<PyInt>() {
        Ok(ConstValue::Int(v.extract()?))
    } else if v.is_instance_of::<PyFloat>() {
        Ok(ConstValue::Float(v.extract()?))
    } else if v.is_instance_of::<PyString>() {
        Ok(ConstValue::Str(v.extract()?))
    } else {
        Err(PyTypeError::new_err(format!(
            "[jit] constexpr values must be int, float, bool, str or None, got {}",
            v.get_type().name()?
        )))
    }
}

/// `(kind, value)` pairs from Python: kind is "ptr", "scalar" or "const".
fn convert(args: &[(String, Bound<'_, PyAny>)]) -> PyRes<Vec<Arg>> {
    let mut out = Vec::with_capacity(args.len());
    for (i, (kind, v)) in args.iter().enumerate() {
        out.push(match kind.as_str() {
            "ptr" => Arg::Ptr(v.cast::<PyTensor>()?.get().inner.clone()),
            "const" => Arg::Const(const_value(v)?),
            _ if v.is_instance_of::<PyBool>() => Arg::Bool(v.extract()?),
            _ if v.is_instance_of::<PyInt>() => Arg::Int(v.extract()?),
            _ if v.is_instance_of::<PyFloat>() => Arg::Float(v.extract()?),
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "[jit] argument {i}: expected a tensor, a Python number or a constexpr, got {}",
                    v.get_type().name()?
                )))
            }
        });
    }
    Ok(out)
}

fn signature(args: &[Arg]) -> KernelSignature {
    let args = args
        .iter()
        .map(|a| match a {
            Arg::Ptr(t) => ArgSpec::Pointer { dtype: t.dtype() },
            Arg::Int(_) => ArgSpec::Scalar { dtype: DType::I32 },
            Arg::Float(_) => ArgSpec::Scalar { dtype: DType::F32 },
            Arg::Bool(_) => ArgSpec::Scalar { dtype: DType::Bool },
            Arg::Const(v) => ArgSpec::Constexpr { value: v.clone() },
        })
        .collect();
    KernelSignature { args }
}

/// The GPU device every tensor argument lives on (the current device if there are none).
fn launch_device(op: &str, tensors: &[&Tensor]) -> Result<Arc<GpuDevice>> {
    let mut index = None;
    for t in tensors {
        match t.place() {
            mpsrt_core::Place::Cpu => return Err(Error::invalid(
                op,
                "kernels run on the GPU; a tensor argument is on 'cpu' (move it with .to('mps'))",
            )),
            mpsrt_core::Place::Gpu(i) => {
                if index.is_some_and(|j| j != i) {
                    return Err(Error::invalid(op, "tensor arguments are on different devices"));
                }
                index = Some(i);
            }
        }
    }
    mpsrt_runtime::gpu_device(index.unwrap_or_else(mpsrt_runtime::current_device))
}

/// Workgroup counts for `grid` per the launch contract (2-D fallback past the per-axis limit).
fn workgroups(op: &str, grid: [u32; 3], max: u32) -> Result<[u32; 3]> {
    if grid.iter().all(|&g| g <= max) {
        return Ok(grid);
    }
    let total = grid.iter().map(|&g| u64::from(g)).product::<u64>();
    // Balanced rows: as few rows as the limit allows, each as short as possible, so at most
    // `y - 1` workgroups are surplus (65,536 programs → 2 × 32,768, not 65,535 + 65,535).
    let y = total.div_ceil(u64::from(max));
    let x = total.div_ceil(y);
    if y > u64::from(max) {
        return Err(Error::invalid(
            op,
            format!("grid {grid:?} has {total} programs, more than {max}x{max} workgroups"),
        ));
    }
    Ok([x as u32, y as u32, 1])
}

fn gpu_buffer<'a>(op: &str, t: &'a Tensor) -> Result<&'a mpsrt_runtime::GpuBuffer> {
    match t.storage() {
        Storage::Gpu(b) => Ok(b),
        Storage::Cpu(_) => Err(Error::invalid(op, "tensor argument is on 'cpu'")),
    }
}

fn launch_jit(
    source: String,
    name: Option<String>,
    args: Vec<Arg>,
    grid: [u32; 3],
    num_warps: Option<u32>,
) -> Result<()> {
    let op = "jit";
    let tensors: Vec<&Tensor> =
        args.iter().filter_map(|a| if let Arg::Ptr(t) = a { Some(t) } else { None }).collect();
    let dev = launch_device(op, &tensors)?;
    let props = dev.properties();
    let limit = props.max_compute_invocations_per_workgroup.max(1);
    let limit = 1u32 << (31 - limit.leading_zeros());
    let wanted = num_warps.map(|w| w.saturating_mul(32)).unwrap_or(256).max(1);
    let wanted = 1u32 << (31 - wanted.leading_zeros());
    let opts = CompileOptions {
        subgroups: props.subgroups,
        max_workgroup_size: wanted.min(limit),
        max_workgroup_storage: props.max_compute_workgroup_storage_size,
        f16: false,
    };
    let sig = signature(&args);
    let memo = format!("{name:?}\0{:?}\0{opts:?}\0{source}", sig.args);
    let cached = compiled_cache().lock().get(&memo).cloned();
    let kernel = match cached {
        Some(k) => k,
        None => {
            let k = Arc::new(mpsrt_jit::compile(&source, name.as_deref(), &sig, &opts)?);
            compiled_cache().lock().insert(memo, k.clone());
            k
        }
    };
    let pkey = (kernel.cache_key.clone(), dev.index());
    let cached = pipeline_cache().lock().get(&pkey).cloned();
    let pipeline = match cached {
        Some(p) => p,
        None => {
            let p = dev.pipeline(Kernel { source: &kernel.wgsl, entry: &kernel.entry_point })?;
            pipeline_cache().lock().insert(pkey, p.clone());
            p
        }
    };
    if grid.contains(&0) {
        return Ok(());
    }
    let wg = workgroups(op, grid, props.max_compute_workgroups_per_dimension)?;
    let mut meta = vec![0u8; kernel.uniform_size as usize];
    for f in &kernel.uniform_layout {
        let word: u32 = match &f.kind {
            UniformKind::NumPrograms(ax) => grid.get(*ax as usize).copied().unwrap_or(1),
            UniformKind::DispatchX => wg[0],
            UniformKind::DispatchY => wg[1],
            UniformKind::ViewOffset { arg } => match args.get(*arg) {
                Some(Arg::Ptr(t)) => t.layout().offset as u32,
                _ => 0,
            },
            UniformKind::Scalar { arg, dtype } => match (args.get(*arg), dtype) {
                (Some(Arg::Int(v)), d) if d.is_float() => (*v as f32).to_bits(),
                (Some(Arg::Int(v)), _) => *v as i32 as u32,
                (Some(Arg::Float(v)), _) => (*v as f32).to_bits(),
                (Some(Arg::Bool(b)), _) => u32::from(*b),
                _ => 0,
            },
        };
        let at = f.offset as usize;
        if let Some(slot) = meta.get_mut(at..at + 4) {
            slot.copy_from_slice(&word.to_le_bytes());
        }
    }
    let mut bindings = Vec::with_capacity(kernel.bindings.len());
    for b in &kernel.bindings {
        match args.get(b.arg_index) {
            Some(Arg::Ptr(t)) => bindings.push(Binding::from(gpu_buffer(op, t)?)),
            _ => return Err(Error::invalid(op, format!("argument '{}' is not a tensor", b.name))),
        }
    }
    dev.dispatch(&kernel.entry_point, &pipeline, &bindings, &meta, wg)
}

/// Compiles (cached) and launches a Triton-language kernel. `args` holds one `(kind, value)` per
/// kernel parameter: `("ptr", _C.Tensor)`, `("scalar", int|float|bool)`, `("const", value)`.
#[pyfunction]
#[pyo3(signature = (source, name, args, grid, num_warps=None))]
fn jit_launch(
    py: Python<'_>,
    source: String,
    name: Option<String>,
    args: Vec<(String, Bound<'_, PyAny>)>,
    grid: (u32, u32, u32),
    num_warps: Option<u32>,
) -> PyRes<()> {
    let args = convert(&args)?;
    let grid = [grid.0, grid.1, grid.2];
    py.detach(move || launch_jit(source, name, args, grid, num_warps)).py_err()
}

/// Compiles a Triton-language kernel without launching it; returns (wgsl, entry, workgroup_size).
#[pyfunction]
#[pyo3(signature = (source, name, args))]
fn jit_compile(
    py: Python<'_>,
    source: String,
    name: Option<String>,
    args: Vec<(String, Bound<'_, PyAny>)>,
) -> PyRes<(String, String, u32)> {
    let args = convert(&args)?;
    let sig = signature(&args);
    let k = py
        .detach(move || {
            mpsrt_jit::compile(&source, name.as_deref(), &sig, &CompileOptions::default())
        })
        .py_err()?;
    Ok((k.wgsl, k.entry_point, k.workgroup_size))
}

/// Launches raw WGSL: `tensors` bind as storage buffers 0..n, non-empty `meta` as a uniform at n.
#[pyfunction]
fn wgsl_launch(
    py: Python<'_>,
    source: String,
    entry: String,
    tensors: Vec<Py<PyTensor>>,
    meta: Vec<u8>,
    workgroups: (u32, u32, u32),
) -> PyRes<()> {
    let ts: Vec<Tensor> = tensors.iter().map(|t| t.get().inner.clone()).collect();
    py.detach(move || {
        let op = "compile_kernel";
        let refs: Vec<&Tensor> = ts.iter().collect();
        let dev = launch_device(op, &refs)?;
        let pipeline = dev.pipeline(Kernel { source: &source, entry: &entry })?;
        let mut bindings = Vec::with_capacity(ts.len());
        for t in &ts {
            bindings.push(Binding::from(gpu_buffer(op, t)?));
        }
        dev.dispatch(op, &pipeline, &bindings, &meta, [workgroups.0, workgroups.1, workgroups.2])
    })
    .py_err()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(jit_launch, m)?)?;
    m.add_function(wrap_pyfunction!(jit_compile, m)?)?;
    m.add_function(wrap_pyfunction!(wgsl_launch, m)?)?;
    Ok(())
}
