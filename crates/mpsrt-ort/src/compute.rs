//! One compiled fused node: the claimed subgraph as an engine `Session` (weights copied out of
//! ORT once at compile time, uploaded once on first use, one plan per input-shape set from the
//! engine's plan cache), and the `Compute` callback that feeds it ORT's inputs and writes ORT's
//! outputs. Errors come back as an `OrtStatus` naming the fused node, its ops and the reason.

use crate::abi::{self, OrtGraph, OrtKernelContext, OrtNode, OrtNodeComputeInfo, Status};
use crate::convert::{build_model, dtype_elem, feed_dtype};
use crate::ort::{self, api, check, fail, R};
use mpsrt_core::Place;
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;

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
}

/// Compiles one fused node's graph for `place`.
pub fn compile(
    graph: *const OrtGraph,
    fused: *const OrtNode,
    place: Place,
    options: SessionOptions,
) -> R<Box<Compiled>> {
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
    let model = build_model(&nodes, &ins, &outs, &opsets, ir)?;
    let session = mpsrt_onnx::import_model(&model, None)
        .and_then(|m| Session::from_graph(m.graph, place, options))
        .map_err(|e| fail(format!("compiling fused node {name:?} ({ops}): {e}")))?;
    let names: Vec<String> = session.inputs().iter().map(|i| i.name.clone()).collect();
    let inputs = ort::node_inputs(fused)?
        .into_iter()
        .map(|vi| ort::value_name(vi).map(|n| names.contains(&n).then_some(n)))
        .collect::<R<Vec<_>>>()?;
    if let Some(missing) = names.iter().find(|n| !inputs.contains(&Some((*n).clone()))) {
        return Err(fail(format!(
            "fused node {name:?}: ORT passes no value for input {missing:?}"
        )));
    }
    let outputs =
        ort::node_outputs(fused)?.into_iter().map(ort::value_name).collect::<R<Vec<_>>>()?;
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
            let (elem, dims) = ort::value_tensor_type(v)?;
            let dtype = feed_dtype(elem).ok_or_else(|| {
                self.err(format!(
                    "input {name:?} has element type {elem}, which the engine does not hold"
                ))
            })?;
            let bytes = ort::tensor_bytes(v, elem, &dims)?;
            let shape: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
            // Types the GPU holds go straight from ORT's buffer to the device (one copy);
            // int64/float64 stay on the host, where the engine narrows them itself.
            let place = self.session.place();
            let at = if place.is_gpu() && dtype.gpu_supported() { place } else { Place::Cpu };
            let t = Tensor::from_bytes(bytes, dtype, &shape, at)
                .map_err(|e| self.err(format!("input {name:?}: {e}")))?;
            feeds.insert(name.clone(), t);
        }
        let results = self.session.run(&feeds).map_err(|e| self.err(e))?;
        let mut by_name: HashMap<&str, &Tensor> =
            results.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut ordered = Vec::with_capacity(self.outputs.len());
        for name in &self.outputs {
            let t = by_name
                .remove(name.as_str())
                .ok_or_else(|| self.err(format!("the engine produced no output {name:?}")))?;
            ordered.push(t);
        }
        let data = Tensor::to_bytes_many(&ordered).map_err(|e| self.err(e))?;
        for (i, (t, bytes)) in ordered.iter().zip(&data).enumerate() {
            let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
            let mut out = ptr::null_mut();
            // SAFETY: ORT allocates the output with these dims.
            check(unsafe {
                a.KernelContext_GetOutput(ctx, i, dims.as_ptr(), dims.len(), &mut out)
            })?;
            let (elem, _) = ort::value_tensor_type(out)?;
            if elem != dtype_elem(t.dtype()) {
                return Err(self.err(format!(
                    "output {:?}: ORT expects element type {elem}, the engine gave {}",
                    self.outputs[i],
                    t.dtype()
                )));
            }
            if bytes.is_empty() {
                continue;
            }
            let mut p = ptr::null_mut();
            // SAFETY: the output holds exactly `bytes.len()` bytes (same dims and dtype).
            unsafe {
                check(a.GetTensorMutableData(out, &mut p))?;
                ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len());
            }
        }
        Ok(())
    }
}
