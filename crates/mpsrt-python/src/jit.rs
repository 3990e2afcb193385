//! Kernel launches from Python: Triton-language `@mpsrt.jit` kernels compiled by `mpsrt-jit`,
//! and raw WGSL (`mpsrt.compile_kernel`). Both are recorded on the device's command stream like
//! every other op, so they are ordered with eager ops without extra synchronization. A kernel
//! writes into the storage buffer of the output tensors it is given (`mpsrt.empty_like`), which
//! later reads of those tensors observe.
//!
//! The `triton_*` functions serve the Triton backend (`mpsrt.triton_backend`): TTIR text is
//! compiled by `mpsrt_jit::compile_ttir`, and launches take Triton's non-constexpr arguments.

use crate::tensor::PyTensor;
use crate::triton_knobs::*;
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
        subgroups: props.subgroups && subgroups_wanted(),
        max_workgroup_size: wanted.min(limit),
        max_workgroup_storage: props.max_compute_workgroup_storage_size,
        f16: false,
        coop: None,
        stage_dot: false,
        slab_vec2: false,
        slab_vec4: false,
        self_bounded: false,
        prune_dead: true,
        uniform_fast: false,
        joint_stage: true,
        prefetch_stage: false,
        f16_store: false,
        emulate_coop: false,
        ..CompileOptions::default()
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
    crate::guard::detach(py, "jit_launch", move || launch_jit(source, name, args, grid, num_warps))
        .py_err()
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
    crate::guard::detach(py, "wgsl_launch", move || {
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

/// A Triton kernel's pipeline on one device (`driver.utils.load_binary`'s module/function).
#[pyclass(frozen, name = "TritonPipeline")]
struct TritonPipeline {
    pipeline: Arc<Pipeline>,
    device: usize,
}

/// Identifies the TTIR compiler build (part of Triton's cache key, so a changed lowering never
/// reuses WGSL from Triton's on-disk cache).
/// Batches device `device` (default: the current one) has submitted so far. The Triton driver's
/// benchmarker records launches without submitting and times the one submission that runs them
/// (host recording excluded); this count tells it whether a batch limit split them.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn triton_submits(device: Option<usize>) -> PyRes<u64> {
    let index = device.unwrap_or_else(mpsrt_runtime::current_device);
    let dev = mpsrt_runtime::gpu_device(index).py_err()?;
    Ok(dev.submit_timing().submits)
}

/// GPU time of `n` calls of `f` on the current device, from the runtime's timestamps
/// (`GpuDevice::gpu_timer`): a mark, the calls (recorded, not submitted), a mark, one submission.
/// Returns `(ms per call, batches submitted between the marks)` — a nonzero count means a batch
/// limit split the calls and the GPU may have idled between parts — or `None` when the adapter
/// has no timestamp queries.
#[pyfunction]
fn triton_gpu_time(
    py: Python<'_>,
    f: Bound<'_, pyo3::PyAny>,
    n: usize,
) -> PyRes<Option<(f64, u64)>> {
    let dev = mpsrt_runtime::gpu_device(mpsrt_runtime::current_device()).py_err()?;
    let Some(mut timer) = dev.gpu_timer(2) else { return Ok(None) };
    py.detach(|| dev.synchronize()).py_err()?;
    let s0 = dev.submit_timing().submits;
    timer.mark().py_err()?;
    for _ in 0..n {
        f.call0()?;
    }
    timer.mark().py_err()?;
    let split = dev.submit_timing().submits - s0;
    let (ticks, period) = py.detach(|| timer.read()).py_err()?;
    let ns: f64 = mpsrt_runtime::ticks_to_ns(&ticks, period).iter().sum();
    Ok(Some((ns / 1e6 / n.max(1) as f64, split)))
}

/// The TTIR compiler's identity for Triton's cache key; it names the subgroup and dot-staging
/// opt-outs and the widening target, so a kernel compiled under one is not served from the
/// cache under another.
#[pyfunction]
fn triton_compiler_version() -> String {
    let sg = if subgroups_wanted() { "" } else { "-nosg" };
    let ds = if dot_stage_wanted() { "" } else { "-nods" };
    let v2 = if vec2_slab_wanted() { "-v2" } else { "" };
    let v4 = if vec4_slab_wanted() { "" } else { "-nov4" };
    let chk = if triton_checked_wanted() { "-chk" } else { "" };
    let pr = if prune_wanted() { "" } else { "-nopr" };
    let uf = if uniform_fast_wanted() { "" } else { "-nouf" };
    let js = if joint_stage_wanted() { "" } else { "-nojs" };
    let pf = if prefetch_wanted() { "" } else { "-nopf" };
    let hs = if f16_store_wanted() { "" } else { "-nohs" };
    let emu = if emulate_coop_wanted() { "-emu" } else { "" };
    let ob = if one_barrier_wanted() { "" } else { "-noob" };
    format!(
        "{}{sg}{ds}{v2}{v4}{chk}{pr}{uf}{js}{pf}{hs}{emu}{ob}-w{}-n{}",
        mpsrt_jit::ttir_compiler_id(),
        widen_to(),
        narrow_to()
    )
}

/// Compiles Triton TTIR (MLIR text) for the current device. `max_threads` caps the workgroup
/// size; workgroup memory is not capped here (the driver compares `workgroup_bytes` with the
/// device limit, so Triton raises OutOfResources and the autotuner skips the config).
/// With `widen`, the workgroup may grow past `max_threads` up to the device limit so that no
/// invocation holds more than 8 elements of a block (see `mpsrt_jit::compile_ttir_widening`).
#[pyfunction]
#[pyo3(signature = (ttir, max_threads, widen=false))]
fn triton_compile<'py>(
    py: Python<'py>,
    ttir: String,
    max_threads: u32,
    widen: bool,
) -> PyRes<Bound<'py, pyo3::types::PyDict>> {
    let k = py
        .detach(move || {
            let dev = mpsrt_runtime::gpu_device(mpsrt_runtime::current_device()).ok();
            let (limit, subgroups, coop, emulate, sg_size) =
                dev.as_ref().map_or((256, false, None, false, 0), |d| {
                    let p = d.properties();
                    let sg = p.subgroups && subgroups_wanted();
                    let limit = p.max_compute_invocations_per_workgroup.max(1);
                    let fixed = if p.subgroup_min_size == p.subgroup_max_size {
                        p.subgroup_min_size
                    } else {
                        0
                    };
                    match triton_coop(p) {
                        None if emulate_coop_wanted() && p.shader_f16 => {
                            // Tiles are dealt as on 32-lane subgroups (the emulation uses none).
                            let c = mpsrt_jit::CoopConfig { size: 16, subgroup: 32 };
                            (limit, sg, Some(c), true, fixed)
                        }
                        c => (limit, sg, c, false, fixed),
                    }
                });
            let floor = |x: u32| 1u32 << (31 - x.max(1).leading_zeros());
            let opts = CompileOptions {
                subgroups,
                max_workgroup_size: floor(max_threads).min(floor(limit)),
                max_workgroup_storage: u32::MAX,
                f16: false,
                coop,
                stage_dot: dot_stage_wanted(),
                slab_vec2: vec2_slab_wanted(),
                slab_vec4: vec4_slab_wanted(),
                self_bounded: !triton_checked_wanted(),
                prune_dead: prune_wanted(),
                uniform_fast: uniform_fast_wanted(),
                joint_stage: joint_stage_wanted(),
                prefetch_stage: prefetch_wanted(),
                f16_store: f16_store_wanted(),
                emulate_coop: emulate,
                subgroup_size: sg_size,
                one_barrier: one_barrier_wanted(),
                narrow_to: narrow_to(),
            };
            let device_max = if widen { floor(limit) } else { opts.max_workgroup_size };
            mpsrt_jit::compile_ttir_widening_to(&ttir, None, &opts, device_max, widen_to())
        })
        .py_err()?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("name", &k.name)?;
    d.set_item("wgsl", &k.wgsl)?;
    d.set_item("workgroup_size", k.workgroup_size)?;
    d.set_item("workgroup_bytes", k.workgroup_bytes)?;
    d.set_item("uniform_size", k.uniform_size)?;
    let uniform: Vec<(&str, usize)> = k
        .uniform_layout
        .iter()
        .map(|f| match &f.kind {
            UniformKind::NumPrograms(0) => ("np0", 0),
            UniformKind::NumPrograms(1) => ("np1", 0),
            UniformKind::NumPrograms(_) => ("np2", 0),
            UniformKind::DispatchX => ("dx", 0),
            UniformKind::DispatchY => ("dy", 0),
            UniformKind::ViewOffset { arg } => ("off", *arg),
            UniformKind::Scalar { arg, dtype } if dtype.is_float() => ("float", *arg),
            UniformKind::Scalar { arg, dtype: DType::Bool } => ("bool", *arg),
            UniformKind::Scalar { arg, .. } => ("int", *arg),
        })
        .collect();
    d.set_item("uniform", uniform)?;
    let bindings: Vec<usize> = k.bindings.iter().map(|b| b.arg_index).collect();
    d.set_item("bindings", bindings)?;
    Ok(d)
}

/// The cooperative-matrix configuration `tl.dot` may use on this adapter: square f16 x f16 ->
/// f32 tiles (16 preferred, then 8) and one fixed subgroup size; `None` (the register-tiled
/// path) otherwise, and under `MPSRT_COOP_MATMUL=0`, which leaves the list empty.
fn triton_coop(p: &mpsrt_runtime::DeviceProperties) -> Option<mpsrt_jit::CoopConfig> {
    if !p.subgroups || p.subgroup_min_size != p.subgroup_max_size || p.subgroup_min_size == 0 {
        return None;
    }
    let has = |s: u32| {
        p.coop_matrix
            .iter()
            .any(|c| c.m == s && c.n == s && c.k == s && c.ab == DType::F16 && c.cr == DType::F32)
    };
    [16, 8]
        .into_iter()
        .find(|&s| has(s))
        .map(|size| mpsrt_jit::CoopConfig { size, subgroup: p.subgroup_min_size })
}

/// Builds the pipeline of a compiled Triton kernel (WGSL) on `device`.
#[pyfunction]
fn triton_load(py: Python<'_>, wgsl: String, device: usize) -> PyRes<TritonPipeline> {
    crate::guard::detach(py, "triton_load", move || {
        let dev = mpsrt_runtime::gpu_device(device)?;
        let kernel = Kernel { source: &wgsl, entry: mpsrt_jit::ENTRY_POINT };
        // A self-bounded module (every storage index clamped by the compiler, register and
        // workgroup arrays indexed by construction) needs none of wgpu's checks.
        let bounded = wgsl.contains(mpsrt_jit::SELF_BOUNDED_MARKER);
        let pipeline = if bounded || triton_unchecked_wanted() {
            // SAFETY: self-bounded modules clamp every storage index to their binding's length
            // (a wrong mask reads or writes inside the buffer, never past it). Otherwise opt-in
            // (`MPSRT_TRITON_UNCHECKED=1`): the user asserts their kernels'
            // masks keep every access in bounds, as Triton's CUDA backend assumes. The
            // generated code itself touches memory only under the kernel's own masks (masked-off
            // lanes never load or store) and its workgroup arrays are sized by construction.
            unsafe { dev.pipeline_unchecked(kernel)? }
        } else {
            dev.pipeline(kernel)?
        };
        Ok(TritonPipeline { pipeline, device })
    })
    .py_err()
}

/// Launches a Triton kernel: `uniform` lists the uniform block's fields as (code, arg) with
/// codes 0-2 grid, 3/4 dispatched x/y, 5 view offset, 6 int, 7 float, 8 bool scalar (the
/// layout `triton_compile` returned); `bindings` the argument index of each storage buffer.
#[pyfunction]
fn triton_launch(
    py: Python<'_>,
    pipe: &TritonPipeline,
    uniform: Vec<(u8, usize)>,
    bindings: Vec<usize>,
    uniform_size: usize,
    args: Vec<Bound<'_, PyAny>>,
    grid: (u32, u32, u32),
) -> PyRes<()> {
    let kinds: Vec<(String, Bound<'_, PyAny>)> = args
        .into_iter()
        .map(|a| (if a.cast::<PyTensor>().is_ok() { "ptr" } else { "scalar" }.to_string(), a))
        .collect();
    let args = convert(&kinds)?;
    let (pipeline, device) = (pipe.pipeline.clone(), pipe.device);
    crate::guard::detach(py, "triton_launch", move || {
        triton_record(
            &pipeline,
            device,
            &uniform,
            &bindings,
            uniform_size,
            &args,
            [grid.0, grid.1, grid.2],
        )
    })
    .py_err()
}

/// Records one launch of a Triton kernel (see [`triton_launch`] for the layout codes).
fn triton_record(
    pipeline: &Pipeline,
    device: usize,
    uniform: &[(u8, usize)],
    bindings: &[usize],
    uniform_size: usize,
    args: &[Arg],
    grid: [u32; 3],
) -> Result<()> {
    let op = "triton";
    let tensors: Vec<&Tensor> =
        args.iter().filter_map(|a| if let Arg::Ptr(t) = a { Some(t) } else { None }).collect();
    let dev = launch_device(op, &tensors)?;
    if dev.index() != device {
        return Err(Error::invalid(
            op,
            format!("kernel loaded on mps:{device} but its tensors are on mps:{}", dev.index()),
        ));
    }
    if grid.contains(&0) {
        return Ok(());
    }
    let wg = workgroups(op, grid, dev.properties().max_compute_workgroups_per_dimension)?;
    // At most 64 fields (16 pointer/scalar arguments is typical): a stack buffer, no allocation.
    let mut meta_buf = [0u8; 256];
    let mut meta_vec;
    let n = uniform_size.max(4 * uniform.len()).div_ceil(16) * 16;
    let meta: &mut [u8] = if n <= meta_buf.len() {
        &mut meta_buf[..n]
    } else {
        meta_vec = vec![0u8; n];
        &mut meta_vec
    };
    for (i, &(code, a)) in uniform.iter().enumerate() {
        let word: u32 = match (code, args.get(a)) {
            (0..=2, _) => grid[code as usize],
            (3, _) => wg[0],
            (4, _) => wg[1],
            (5, Some(Arg::Ptr(t))) => t.layout().offset as u32,
            (6, Some(Arg::Int(v))) => match i32::try_from(*v) {
                Ok(x) => x as u32,
                // Triton types such ints i64; the kernel computes in 32 bits.
                Err(_) => {
                    return Err(Error::invalid(
                        op,
                        format!("argument {a} = {v} does not fit in 32 bits (64-bit integers are not supported on the GPU)"),
                    ))
                }
            },
            (6 | 8, Some(Arg::Bool(b))) => u32::from(*b),
            (7, Some(Arg::Float(v))) => (*v as f32).to_bits(),
            (7, Some(Arg::Int(v))) => (*v as f32).to_bits(),
            (8, Some(Arg::Int(v))) => u32::from(*v != 0),
            (_, got) => {
                let got = match got {
                    Some(Arg::Ptr(_)) => "a tensor",
                    Some(Arg::Float(_)) => "a float",
                    Some(_) => "a scalar",
                    None => "nothing",
                };
                return Err(Error::invalid(
                    op,
                    format!("argument {a}: the kernel expects another kind of value, got {got}"),
                ));
            }
        };
        meta[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
    }
    let mut binds = Vec::with_capacity(bindings.len());
    for &a in bindings {
        match args.get(a) {
            Some(Arg::Ptr(t)) => binds.push(Binding::from(gpu_buffer(op, t)?)),
            _ => return Err(Error::invalid(op, format!("argument {a} must be a tensor"))),
        }
    }
    dev.dispatch(op, pipeline, &binds, meta, wg)
}

/// Triton's launcher for one compiled kernel (`driver.launcher_cls(src, metadata)` returns
/// one): called as `(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
/// enter_hook, exit_hook, *args)` with the kernel's Python arguments. Everything per launch
/// happens here (no Python frame of ours): constexpr arguments are dropped by index, tensors
/// are read from mpsrt tensors (`._t`) or `triton.reinterpret` wrappers (`.base._t`), and the
/// uniform block is built on the stack.
#[pyclass(frozen, name = "TritonLauncher")]
struct TritonLauncher {
    keep: Vec<usize>,
    uniform: Vec<(u8, usize)>,
    bindings: Vec<usize>,
    uniform_size: usize,
}

impl TritonLauncher {
    fn arg(v: &Bound<'_, PyAny>, i: usize) -> PyRes<Arg> {
        let py = v.py();
        if let Ok(t) = v.cast::<PyTensor>() {
            return Ok(Arg::Ptr(t.get().inner.clone()));
        }
        if v.is_instance_of::<PyBool>() {
            return Ok(Arg::Bool(v.extract()?));
        }
        if v.is_instance_of::<PyInt>() {
            return Ok(Arg::Int(v.extract()?));
        }
        if v.is_instance_of::<PyFloat>() {
            return Ok(Arg::Float(v.extract()?));
        }
        if let Ok(t) = v.getattr(pyo3::intern!(py, "_t")) {
            if let Ok(t) = t.cast::<PyTensor>() {
                return Ok(Arg::Ptr(t.get().inner.clone()));
            }
        }
        if let Ok(b) = v.getattr(pyo3::intern!(py, "base")) {
            if let Ok(t) = b.getattr(pyo3::intern!(py, "_t")) {
                if let Ok(t) = t.cast::<PyTensor>() {
                    return Ok(Arg::Ptr(t.get().inner.clone()));
                }
            }
        }
        if let Ok(x) = v.call_method0(pyo3::intern!(py, "item")) {
            if !x.is(v) {
                return Self::arg(&x, i);
            }
        }
        Err(PyTypeError::new_err(format!(
            "[mpsrt triton backend] argument {i}: expected an mpsrt tensor or a Python number, got {}",
            v.get_type().name()?
        )))
    }
}

#[pymethods]
impl TritonLauncher {
    #[new]
    fn new(
        keep: Vec<usize>,
        uniform: Vec<(u8, usize)>,
        bindings: Vec<usize>,
        uniform_size: usize,
    ) -> Self {
        TritonLauncher { keep, uniform, bindings, uniform_size }
    }

    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, pyo3::types::PyTuple>) -> PyRes<()> {
        const FIXED: usize = 9;
        if args.len() < FIXED {
            return Err(PyTypeError::new_err(format!(
                "[mpsrt triton backend] the launcher takes 9 launch arguments then the kernel's, got {}",
                args.len()
            )));
        }
        let grid = [
            args.get_item(0)?.extract::<u32>()?,
            args.get_item(1)?.extract::<u32>()?,
            args.get_item(2)?.extract::<u32>()?,
        ];
        let function = args.get_item(4)?;
        let pipe = function.cast::<TritonPipeline>()?.get();
        let (launch_meta, enter, exit) = (args.get_item(6)?, args.get_item(7)?, args.get_item(8)?);
        if !enter.is_none() {
            enter.call1((&launch_meta,))?;
        }
        let mut rt = Vec::with_capacity(self.keep.len());
        for &k in &self.keep {
            rt.push(Self::arg(&args.get_item(FIXED + k)?, k)?);
        }
        let (pipeline, device) = (&pipe.pipeline, pipe.device);
        crate::guard::detach(py, "triton_launch", || {
            triton_record(
                pipeline,
                device,
                &self.uniform,
                &self.bindings,
                self.uniform_size,
                &rt,
                grid,
            )
        })
        .py_err()?;
        if !exit.is_none() {
            exit.call1((&launch_meta,))?;
        }
        Ok(())
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TritonPipeline>()?;
    m.add_class::<TritonLauncher>()?;
    m.add_function(wrap_pyfunction!(triton_compiler_version, m)?)?;
    m.add_function(wrap_pyfunction!(triton_submits, m)?)?;
    m.add_function(wrap_pyfunction!(triton_gpu_time, m)?)?;
    m.add_function(wrap_pyfunction!(triton_compile, m)?)?;
    m.add_function(wrap_pyfunction!(triton_load, m)?)?;
    m.add_function(wrap_pyfunction!(triton_launch, m)?)?;
    m.add_function(wrap_pyfunction!(jit_launch, m)?)?;
    m.add_function(wrap_pyfunction!(jit_compile, m)?)?;
    m.add_function(wrap_pyfunction!(wgsl_launch, m)?)?;
    Ok(())
}
