//! `OrtGraph` nodes → ONNX `ModelProto`, fed to the existing importer (`mpsrt-onnx`), so the
//! EP runs exactly the graph path that `mpsrt.onnx.InferenceSession` runs. The mapping follows
//! ORT's own documentation of it (`ort_graph_to_proto.h`): node op/domain/attributes, constant
//! initializers as `TensorProto` raw data, boundary values as typed `ValueInfoProto`s, and the
//! node outputs' types as `value_info` (the contrib rewrites read ranks from them).

use crate::abi::{self, OrtNode, OrtValueInfo};
use crate::ort::{self, api, check, fail, R};
use mpsrt_core::DType;
use mpsrt_onnx::proto::attribute_proto::AttributeType;
use mpsrt_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use mpsrt_onnx::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::ptr;

/// ONNX element types that may cross the fused node's boundary (fed from / returned to ORT):
/// the ones the engine holds as they are.
pub fn feed_dtype(elem: i32) -> Option<DType> {
    Some(match elem {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        _ => return None,
    })
}

pub fn dtype_elem(d: DType) -> i32 {
    match d {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
    }
}

/// Bytes per element of an ONNX element type with a fixed size.
pub fn elem_size(elem: i32) -> Option<usize> {
    Some(match elem {
        2 | 3 | 9 => 1,
        4 | 5 | 10 | 16 => 2,
        1 | 6 | 12 => 4,
        7 | 11 | 13 => 8,
        _ => return None,
    })
}

/// One boundary value: name and (if ORT knows it) tensor type.
#[derive(Debug, Clone)]
pub struct Boundary {
    pub name: String,
    pub ty: Option<ort::TensorType>,
}

impl Boundary {
    pub fn of(vi: *const OrtValueInfo) -> R<Boundary> {
        Ok(Boundary { name: ort::value_name(vi)?, ty: ort::value_type(vi)? })
    }
}

fn value_info(b: &Boundary) -> ValueInfoProto {
    let r#type = b.ty.as_ref().map(|t| TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(t.elem),
            shape: t.dims.as_ref().map(|dims| TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|(d, sym)| Dimension {
                        value: if *d >= 0 {
                            Some(dimension::Value::DimValue(*d))
                        } else if !sym.is_empty() {
                            Some(dimension::Value::DimParam(sym.clone()))
                        } else {
                            None
                        },
                        denotation: None,
                    })
                    .collect(),
            }),
        })),
        denotation: None,
    });
    ValueInfoProto { name: Some(b.name.clone()), r#type, ..Default::default() }
}

/// A tensor `OrtValue` as a `TensorProto` (raw little-endian data).
fn tensor_proto(name: &str, v: *const abi::OrtValue) -> R<TensorProto> {
    let (elem, dims) = ort::value_tensor_type(v)?;
    let bytes = ort::tensor_bytes(v, elem, &dims)
        .map_err(|s| fail(format!("initializer {name:?}: {}", ort::take_message(s))))?;
    Ok(TensorProto {
        name: Some(name.to_string()),
        dims,
        data_type: Some(elem),
        raw_data: Some(bytes.to_vec()),
        ..Default::default()
    })
}

/// Bytes of an attribute as ORT's `ReadOpAttr` writes them (asks for the size first).
fn read_attr(a: *const abi::OrtOpAttr, ty: i32) -> R<Vec<u8>> {
    let api = api();
    let mut size = 0usize;
    // SAFETY: a zero-length read reports the size (as an error status we release).
    let s = unsafe { api.ReadOpAttr(a, ty, ptr::null_mut(), 0, &mut size) };
    if !s.is_null() {
        // SAFETY: we own the status.
        unsafe { api.ReleaseStatus(s) };
    }
    let mut buf = vec![0u8; size];
    if size > 0 {
        // SAFETY: `buf` holds `size` bytes.
        check(unsafe { api.ReadOpAttr(a, ty, buf.as_mut_ptr() as *mut c_void, size, &mut size) })?;
        buf.truncate(size);
    }
    Ok(buf)
}

fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().unwrap_or([0; N]))
}

fn attribute(a: *const abi::OrtOpAttr) -> R<AttributeProto> {
    let api = api();
    let mut name = ptr::null();
    let mut ty = 0i32;
    // SAFETY: per the C API.
    unsafe {
        check(api.OpAttr_GetName(a, &mut name))?;
        check(api.OpAttr_GetType(a, &mut ty))?;
    }
    let name = ort::cstr(name);
    let mut p = AttributeProto { name: Some(name.clone()), ..Default::default() };
    match ty {
        abi::ATTR_INT => {
            p.i = words::<8>(&read_attr(a, ty)?).next().map(i64::from_le_bytes);
            p.r#type = Some(AttributeType::Int as i32);
        }
        abi::ATTR_INTS => {
            p.ints = words::<8>(&read_attr(a, ty)?).map(i64::from_le_bytes).collect();
            p.r#type = Some(AttributeType::Ints as i32);
        }
        abi::ATTR_FLOAT => {
            p.f = words::<4>(&read_attr(a, ty)?).next().map(f32::from_le_bytes);
            p.r#type = Some(AttributeType::Float as i32);
        }
        abi::ATTR_FLOATS => {
            p.floats = words::<4>(&read_attr(a, ty)?).map(f32::from_le_bytes).collect();
            p.r#type = Some(AttributeType::Floats as i32);
        }
        abi::ATTR_STRING => {
            let mut s = read_attr(a, ty)?;
            while s.last() == Some(&0) {
                s.pop();
            }
            p.s = Some(s);
            p.r#type = Some(AttributeType::String as i32);
        }
        abi::ATTR_STRINGS => {
            // ORT writes the strings one after another, each NUL-terminated.
            let b = read_attr(a, ty)?;
            let mut parts: Vec<Vec<u8>> = b.split(|&c| c == 0).map(<[u8]>::to_vec).collect();
            if b.last() == Some(&0) {
                parts.pop();
            }
            p.strings = parts;
            p.r#type = Some(AttributeType::Strings as i32);
        }
        abi::ATTR_TENSOR => {
            let mut v = ptr::null_mut();
            // SAFETY: we own the returned value and release it after copying.
            check(unsafe { api.OpAttr_GetTensorAttributeAsOrtValue(a, &mut v) })?;
            let t = tensor_proto(&name, v);
            // SAFETY: as above.
            unsafe { api.ReleaseValue(v) };
            p.t = Some(t?);
            p.r#type = Some(AttributeType::Tensor as i32);
        }
        other => {
            return Err(fail(format!(
                "attribute {name:?} has type {other}, which is not converted"
            )))
        }
    }
    Ok(p)
}

/// A node as a `NodeProto`, its constant initializer inputs collected into `inits`.
fn node_proto(
    n: *const OrtNode,
    inits: &mut HashMap<String, TensorProto>,
    types: &mut HashMap<String, Boundary>,
) -> R<NodeProto> {
    let api = api();
    let mut input = Vec::new();
    for vi in ort::node_inputs(n)? {
        let name = ort::value_name(vi)?;
        if !name.is_empty() && !inits.contains_key(&name) {
            if let Some(v) = ort::initializer(vi)? {
                inits.insert(name.clone(), tensor_proto(&name, v)?);
            }
        }
        input.push(name);
    }
    let mut output = Vec::new();
    for vi in ort::node_outputs(n)? {
        let b = Boundary::of(vi)?;
        output.push(b.name.clone());
        if !b.name.is_empty() && b.ty.is_some() {
            types.insert(b.name.clone(), b);
        }
    }
    let attrs = ort::array(
        // SAFETY: per the C API.
        |c| unsafe { api.Node_GetNumAttributes(n, c) },
        |p, k| unsafe { api.Node_GetAttributes(n, p, k) },
        ptr::null(),
    )?;
    let attribute = attrs.into_iter().map(attribute).collect::<R<Vec<_>>>()?;
    let domain = ort::node_domain(n)?;
    Ok(NodeProto {
        op_type: Some(ort::node_op(n)?),
        name: Some(ort::node_name(n)?),
        domain: (!domain.is_empty()).then_some(domain),
        input,
        output,
        attribute,
        ..Default::default()
    })
}

/// Builds a model of `nodes` (in topological order) whose graph inputs are `inputs` (constant
/// initializers among them become initializers) and whose outputs are `outputs`.
pub fn build_model(
    nodes: &[*const OrtNode],
    inputs: &[*const OrtValueInfo],
    outputs: &[*const OrtValueInfo],
    opsets: &[(String, i64)],
    ir_version: i64,
) -> R<ModelProto> {
    let mut inits = HashMap::new();
    let mut types = HashMap::new();
    // Contrib nodes stay as they are: the importer rewrites them (`mpsrt_onnx::contrib`), reading
    // ranks from the value infos below.
    let node =
        nodes.iter().map(|&n| node_proto(n, &mut inits, &mut types)).collect::<R<Vec<_>>>()?;
    let mut input = Vec::new();
    let mut seen = HashSet::new();
    for &vi in inputs {
        let b = Boundary::of(vi)?;
        if b.name.is_empty() || !seen.insert(b.name.clone()) {
            continue;
        }
        if !inits.contains_key(&b.name) {
            if let Some(v) = ort::initializer(vi)? {
                inits.insert(b.name.clone(), tensor_proto(&b.name, v)?);
                continue;
            }
            input.push(value_info(&b));
        }
    }
    let output = outputs
        .iter()
        .map(|&vi| Boundary::of(vi).map(|b| value_info(&b)))
        .collect::<R<Vec<_>>>()?;
    let outs: HashSet<String> = output.iter().filter_map(|o| o.name.clone()).collect();
    let value_info = types.values().filter(|b| !outs.contains(&b.name)).map(value_info).collect();
    let graph = GraphProto {
        name: Some("mpsrt_ort_subgraph".into()),
        node,
        initializer: inits.into_values().collect(),
        input,
        output,
        value_info,
        ..Default::default()
    };
    Ok(ModelProto {
        ir_version: Some(ir_version.max(7)),
        producer_name: Some("mpsrt-ort".into()),
        graph: Some(graph),
        opset_import: opsets
            .iter()
            .map(|(d, v)| OperatorSetIdProto { domain: Some(d.clone()), version: Some(*v) })
            .collect(),
        ..Default::default()
    })
}
