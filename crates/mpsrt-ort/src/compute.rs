//! One compiled fused node: the claimed subgraph as an engine `Session` (weights copied out of
//! ORT once at compile time, uploaded once on first use, one plan per input-shape set from the
//! engine's plan cache), and the `Compute` callback that feeds it ORT's inputs and writes ORT's
//! outputs. Errors come back as an `OrtStatus` naming the fused node, its ops and the reason.

use crate::abi::{self, OrtGraph, OrtKernelContext, OrtNode, OrtNodeComputeInfo, Status};
use crate::convert::{build_model, dtype_elem, feed_dtype};
use crate::memory;
use crate::options::EpOptions;
use crate::ort::{self, api, check, fail, R};
use mpsrt_core::{Layout, Place};
use mpsrt_engine::Session;
use mpsrt_runtime::Storage;
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fused node: `OrtNodeComputeInfo` first, so ORT's pointer is ours.
#[repr(C)]
pub struct Compiled {
    base: OrtNodeComputeInfo,
    name: String,
    ops: String,
    session: Session,
    /// For each fused-node input index: the session input it feeds (`None`: a constant we
    /// already hold, ORT still passes it).
    inputs: Vec<Option<String>>,
    /// Fused-node outputs in ORT's order.
    outputs: Vec<String>,
    /// Runs so far (the verbose log describes the plan after the first and the fourth).
    runs: AtomicUsize,
}

/// Compiles one fused node's graph for `place`, taking the session `GetCapability` compiled
/// for the same nodes from `cache` when its inputs and outputs fit what ORT passes.
pub fn compile(
    graph: *const OrtGraph,
    fused: *const OrtNode,
    place: Place,
    ep_options: &EpOptions,
    cache: &mut HashMap<Vec<String>, Session>,
) -> R<Box<Compiled>> {
    let options = ep_options.engine();
    let nodes = ort::graph_nodes(graph)?;
    let ins = ort::graph_inputs(graph)?;
    let outs = ort::graph_outputs(graph)?;
    let opsets = ort::graph_opsets(graph)?;
    let mut ir = 0i64;
    // SAFETY: per the C API.
    check(unsafe { api().Graph_GetOnnxIRVersion(graph, &mut ir) })?;
    let name = ort::node_name(fused)?;
    let mut ops: Vec<String> = nodes.iter().map(|&n| ort::node_op(n)).collect::<R<_>>()?;
    ops.dedup();
    let ops = if ops.len() > 12 {
        format!("{} ops: {}, ...", nodes.len(), ops[..12].join(", "))
    } else {
        ops.join(", ")
    };
    let fused_ins =
        ort::node_inputs(fused)?.into_iter().map(ort::value_name).collect::<R<Vec<_>>>()?;
    let outputs =
        ort::node_outputs(fused)?.into_iter().map(ort::value_name).collect::<R<Vec<_>>>()?;
    let key = crate::capability::group_key(
        nodes
            .iter()
            .map(|&n| ort::node_outputs(n))
            .collect::<R<Vec<_>>>()?
            .into_iter()
            .flatten()
            .map(ort::value_name)
            .collect::<R<Vec<_>>>()?,
    );
    let fits = |s: &Session| {
        s.place() == place
            && s.options() == options
            && s.inputs().iter().all(|i| fused_ins.contains(&i.name))
            && outputs.iter().all(|o| s.outputs().iter().any(|so| &so.name == o))
    };
    let session = match cache.remove(&key).filter(|s| fits(s)) {
        Some(s) => {
            crate::log(&format!("compile {name:?}: the session from GetCapability"));
            s
        }
        None => {
            let model = build_model(&nodes, &ins, &outs, &opsets, ir)?;
            mpsrt_onnx::import_model(&model, None)
                .and_then(|m| {
                    drop(model);
                    Session::from_graph_with_precision(
                        m.graph,
                        place,
                        options,
                        ep_options.precision,
                    )
                })
                .map_err(|e| fail(format!("compiling fused node {name:?} ({ops}): {e}")))?
        }
    };
    let names: Vec<String> = session.inputs().iter().map(|i| i.name.clone()).collect();
    let inputs: Vec<Option<String>> =
        fused_ins.into_iter().map(|n| names.contains(&n).then_some(n)).collect();
    if let Some(missing) = names.iter().find(|n| !inputs.contains(&Some((*n).clone()))) {
        return Err(fail(format!(
            "fused node {name:?}: ORT passes no value for input {missing:?}"
        )));
    }
    crate::log(&format!(
        "compiled {name:?} on {place}: {} nodes ({ops}), inputs {names:?}, outputs {outputs:?}",
        nodes.len()
    ));
    Ok(Box::new(Compiled {
        base: OrtNodeComputeInfo {
            ort_version_supported: abi::ORT_API_LEVEL,
            create_state,
            compute,
            release_state,
        },
        name,
        ops,
        session,
        inputs,
        outputs,
        runs: AtomicUsize::new(0),
    }))
}

/// Frees a `Compiled` handed to ORT as `*mut OrtNodeComputeInfo`.
///
/// # Safety
/// `p` must come from `Box::into_raw(Box<Compiled>)` and not be used again.
pub unsafe fn release(p: *mut OrtNodeComputeInfo) {
    if !p.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(p as *mut Compiled) });
    }
}

unsafe extern "C" fn create_state(
    _this: *mut OrtNodeComputeInfo,
    _ctx: *mut abi::OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> Status {
    crate::guard("CreateState", || {
        // SAFETY: ORT passes a valid out pointer. The state lives in `Compiled` itself.
        unsafe { *state = ptr::null_mut() };
        ptr::null_mut()
    })
}

unsafe extern "C" fn release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {}

unsafe extern "C" fn compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> Status {
    crate::guard("Compute", || {
        // SAFETY: `this` is the `Compiled` we returned from Compile.
        let c = unsafe { &*(this as *const Compiled) };
        match c.run(ctx) {
            Ok(()) => ptr::null_mut(),
            Err(s) => s,
        }
    })
}

impl Compiled {
    fn err(&self, why: impl std::fmt::Display) -> Status {
        fail(format!("fused node {:?} ({}): {why}", self.name, self.ops))
    }

    /// One fused-node input as an engine tensor: in place when ORT holds it in our device
    /// memory on the session's GPU, else copied from wherever it lives.
    fn input(&self, name: &str, v: *const abi::OrtValue) -> R<Tensor> {
        let (elem, dims) = ort::value_tensor_type(v)?;
        let dtype = feed_dtype(elem).ok_or_else(|| {
            self.err(format!(
                "input {name:?} has element type {elem}, which the engine does not hold"
            ))
        })?;
        let shape: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
        let place = self.session.place();
        let at = if place.is_gpu() && dtype.gpu_supported() { place } else { Place::Cpu };
        let len = shape.iter().product::<usize>() * dtype.size();
        let mut p = ptr::null();
        // SAFETY: a live tensor value.
        check(unsafe { api().GetTensorData(v, &mut p) })?;
        if len > 0 && memory::is_device(p as usize) {
            let bad = |e: mpsrt_core::Error| self.err(format!("input {name:?}: {e}"));
            let (buf, off) = memory::resolve("Compute", p as usize, len).map_err(bad)?;
            if at == Place::Gpu(buf.device().index()) && off.is_multiple_of(dtype.size()) {
                let mut layout = Layout::contiguous(&shape);
                layout.offset = off / dtype.size();
                memory::count(memory::IN_PLACE, 1);
                return Tensor::from_storage(Storage::Gpu(buf), layout, dtype).map_err(bad);
            }
            // A type the engine keeps on the host (int64 ids and masks): the host mirror the
            // data transfer kept when ORT uploaded it, else a read back (a GPU round trip).
            if let Some(bytes) = memory::mirror(&buf, off, len) {
                memory::count(memory::IN_MIRRORED, 1);
                return Tensor::from_bytes(&bytes, dtype, &shape, at).map_err(bad);
            }
            let bytes = buf.device().read(&buf, off as u64, len as u64).map_err(bad)?;
            memory::count(memory::IN_COPIED, 1);
            memory::count(memory::D2H, len);
            return Tensor::from_bytes(&bytes, dtype, &shape, at).map_err(bad);
        }
        let bytes = ort::tensor_bytes(v, elem, &dims)?;
        memory::count(memory::IN_COPIED, 1);
        // Types the GPU holds go straight from ORT's buffer to the device (one copy);
        // int64/float64 stay on the host, where the engine narrows them itself.
        Tensor::from_bytes(bytes, dtype, &shape, at)
            .map_err(|e| self.err(format!("input {name:?}: {e}")))
    }

    /// Verbose log: the engine's plan for these feeds and whether it is replayed (the
    /// replay needs two runs), to compare with the same model in `mpsrt bench`.
    fn describe(&self, run: usize, feeds: &HashMap<String, Tensor>) {
        let shapes: Option<Vec<Vec<usize>>> = self
            .session
            .inputs()
            .iter()
            .map(|i| feeds.get(&i.name).map(|t| t.shape().to_vec()))
            .collect();
        let Some(shapes) = shapes else { return };
        let plan = self.session.plan_for(&shapes).map(|p| p.summary());
        let replay = self.session.replay_status(&shapes);
        crate::log(&format!(
            "run {run} of {:?} with shapes {shapes:?}: plan {}; replay {}",
            self.name,
            plan.unwrap_or_else(|e| e.to_string()),
            replay.unwrap_or_else(|e| e.to_string())
        ));
    }

    fn run(&self, ctx: *mut OrtKernelContext) -> R<()> {
        let a = api();
        let mut feeds = HashMap::with_capacity(self.inputs.len());
        for (i, name) in self.inputs.iter().enumerate() {
            let Some(name) = name else { continue };
            let mut v = ptr::null();
            // SAFETY: index within the fused node's inputs.
            check(unsafe { a.KernelContext_GetInput(ctx, i, &mut v) })?;
            if v.is_null() {
                return Err(self.err(format!("input {name:?} is missing")));
            }
            feeds.insert(name.clone(), self.input(name, v)?);
        }
        let results = self.session.run(&feeds).map_err(|e| self.err(e))?;
        let run = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        if run == 1 || run == 4 {
            self.describe(run, &feeds);
        }
        let mut by_name: HashMap<&str, &Tensor> =
            results.iter().map(|(n, t)| (n.as_str(), t)).collect();
        // ORT allocates each output (in our device memory when it has our allocator).
        let mut host: Vec<(&Tensor, *mut u8)> = Vec::new();
        for (i, name) in self.outputs.iter().enumerate() {
            let t = by_name
                .remove(name.as_str())
                .ok_or_else(|| self.err(format!("the engine produced no output {name:?}")))?;
            let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
            let mut out = ptr::null_mut();
            // SAFETY: ORT allocates the output with these dims.
            let mut get = || unsafe {
                a.KernelContext_GetOutput(ctx, i, dims.as_ptr(), dims.len(), &mut out)
            };
            // A fresh result buffer nothing else holds (not an input's, a constant's or a
            // replay recording's) can become ORT's output itself if ORT allocates it now.
            let adopt = match t.storage() {
                Storage::Gpu(b) if t.is_contiguous() && t.layout().offset == 0 => {
                    (Arc::strong_count(b) == 1).then(|| b.clone())
                }
                _ => None,
            };
            let len = t.numel() * t.dtype().size();
            let adopted = adopt.clone();
            check(match adopt {
                Some(b) => memory::adopting(b, len, get),
                None => get(),
            })?;
            let (elem, _) = ort::value_tensor_type(out)?;
            if elem != dtype_elem(t.dtype()) {
                return Err(self.err(format!(
                    "output {name:?}: ORT expects element type {elem}, the engine gave {}",
                    t.dtype()
                )));
            }
            if t.numel() == 0 {
                continue;
            }
            let mut p = ptr::null_mut();
            // SAFETY: the output holds exactly numel × size bytes (same dims and dtype).
            check(unsafe { a.GetTensorMutableData(out, &mut p) })?;
            if memory::is_device(p as usize) {
                let same = adopted.as_ref().is_some_and(|b| {
                    memory::resolve("Compute", p as usize, len)
                        .is_ok_and(|(r, off)| off == 0 && Arc::ptr_eq(&r, b))
                });
                if same {
                    memory::count(memory::OUT_ADOPTED, 1);
                } else {
                    store(t, p as usize).map_err(|e| self.err(format!("output {name:?}: {e}")))?;
                }
                memory::count(memory::OUT_DEVICE, 1);
            } else {
                memory::count(memory::OUT_HOST, 1);
                host.push((t, p as *mut u8));
            }
        }
        let ts: Vec<&Tensor> = host.iter().map(|(t, _)| *t).collect();
        let data = Tensor::to_bytes_many(&ts).map_err(|e| self.err(e))?;
        for ((_, p), bytes) in host.iter().zip(&data) {
            // SAFETY: the output holds exactly `bytes.len()` bytes.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), *p, bytes.len()) };
        }
        Ok(())
    }
}

/// Writes an engine result into ORT's output at device address `addr`: a GPU copy when the
/// result is on the GPU, an upload (and a host mirror) when the engine kept it on the host
/// (int64, CPU place).
fn store(t: &Tensor, addr: usize) -> mpsrt_core::Result<()> {
    let t = t.contiguous()?;
    let es = t.dtype().size();
    let len = t.numel() * es;
    let (db, doff) = memory::resolve("Compute", addr, len)?;
    match t.storage() {
        Storage::Gpu(sb) => memory::copy_between(sb, t.layout().offset * es, &db, doff, len),
        Storage::Cpu(_) => {
            // Kept on the host by the engine (int64): the next fused node reading it takes
            // the mirror instead of reading the device.
            let bytes: std::sync::Arc<[u8]> = t.to_bytes()?.into();
            memory::write_at(&db, doff, &bytes)?;
            memory::set_mirror(&db, doff, bytes);
            Ok(())
        }
    }
}
