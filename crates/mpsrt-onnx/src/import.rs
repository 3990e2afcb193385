//! The import driver: decodes the protobuf, checks opsets, reports every unsupported op type at
//! once, creates graph values for inputs/initializers/node outputs, runs the per-op importers
//! from the registry, then sorts and shape-infers the graph so errors surface at load time.

use crate::ctx::Ctx;
use crate::ops;
use crate::proto::{type_proto, ModelProto, NodeProto, ValueInfoProto};
use crate::tensor::{elem_type, map_dtype, to_host};
use mpsrt_core::{DType, Error, Result};
use mpsrt_graph::{propagate, Declared, Dim, Graph};
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// Oldest default-domain opset accepted (opset 7 introduced NumPy broadcasting everywhere).
pub const MIN_OPSET: i64 = 7;
/// Newest opset known to the pinned `onnx` package (1.23.2).
pub const MAX_OPSET: i64 = 28;

const OP: &str = "onnx";

/// A loaded model: the graph plus the metadata servers and CLIs show.
#[derive(Debug, Clone)]
pub struct Model {
    pub graph: Graph,
    pub opset: i64,
    pub ir_version: i64,
    pub producer: String,
    pub graph_name: String,
}

/// Loads a model file; external data is resolved relative to the file's directory.
pub fn load_path(path: impl AsRef<Path>) -> Result<Model> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io(OP, format!("cannot read {}: {e}", path.display())))?;
    let dir = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    load_bytes_with_dir(&bytes, dir)
}

/// Loads a model from memory (external data is refused: there is no directory to resolve it in).
pub fn load_bytes(bytes: &[u8]) -> Result<Model> {
    load_bytes_with_dir(bytes, None)
}

/// Loads from memory, resolving external data under `base_dir`.
pub fn load_bytes_with_dir(bytes: &[u8], base_dir: Option<&Path>) -> Result<Model> {
    let model = ModelProto::decode(bytes).map_err(|e| {
        Error::invalid(OP, format!("not a valid ONNX model (protobuf decode failed: {e})"))
    })?;
    import_model(&model, base_dir)
}

/// Converts a decoded `ModelProto` into a graph.
pub fn import_model(model: &ModelProto, base_dir: Option<&Path>) -> Result<Model> {
    let gp = model.graph.as_ref().ok_or_else(|| Error::invalid(OP, "model has no graph"))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .ok_or_else(|| {
            Error::unsupported(OP, "model imports no default-domain (ai.onnx) opset; only ai.onnx models are supported")
        })?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(Error::unsupported(
            OP,
            format!("model uses opset {opset}; mpsrt supports opsets {MIN_OPSET} to {MAX_OPSET}"),
        ));
    }
    // `com.microsoft` contrib ops (ORT-optimized models) become default-domain nodes first.
    let expanded = crate::contrib::expand(gp, opset, base_dir)?;
    let nodes: &[NodeProto] = &expanded.nodes;
    check_supported(nodes)?;

    let mut g = Graph::new();
    let mut init_names = HashSet::new();
    for t in gp.initializer.iter().chain(&expanded.constants) {
        let name = t.name.clone().unwrap_or_default();
        if expanded.unused.contains(&name) {
            continue; // packed weights a rewrite replaced by its own constant
        }
        let host = to_host(t, base_dir)?;
        g.add_initializer(name.clone(), host)?;
        init_names.insert(name);
    }
    if !gp.sparse_initializer.is_empty() {
        return Err(Error::unsupported(OP, "sparse initializers are not supported"));
    }
    for vi in &gp.input {
        let name = vi.name.clone().unwrap_or_default();
        // IR < 4 lists initializers among the inputs too; those are constants, not inputs.
        if init_names.contains(&name) {
            continue;
        }
        let decl = declared(vi);
        let (dtype, shape) = value_type(vi, &decl)?;
        let id = g.add_input(name, dtype, shape)?;
        g.declared_inputs.insert(id, decl);
    }
    for node in nodes {
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            g.add_value(o.clone(), DType::F32, None).map_err(|_| {
                Error::invalid(OP, format!("value {o:?} is produced twice (or is also an input)"))
            })?;
        }
    }
    let elem_types = declared_elem_types(gp);
    for node in nodes {
        let op_type = node.op_type.as_deref().unwrap_or("");
        let importer = ops::lookup(op_type)
            .ok_or_else(|| Error::unsupported(OP, format!("no importer for {op_type}")))?;
        let mut cx = Ctx { graph: &mut g, opset, node, base_dir, elem_types: &elem_types };
        importer(&mut cx)?;
    }
    for vi in &gp.output {
        let name = vi.name.clone().unwrap_or_default();
        let id = g.find(&name).ok_or_else(|| {
            Error::invalid(OP, format!("graph output {name:?} is never produced"))
        })?;
        g.outputs.push(id);
        g.declared_outputs.insert(id, declared(vi));
    }
    g.toposort()?;
    g.validate()?;
    propagate(&mut g, true)?;
    Ok(Model {
        graph: g,
        opset,
        ir_version: model.ir_version.unwrap_or(0),
        producer: model.producer_name.clone().unwrap_or_default(),
        graph_name: gp.name.clone().unwrap_or_default(),
    })
}

/// ONNX element type codes of every value the graph declares a tensor type for.
fn declared_elem_types(gp: &crate::proto::GraphProto) -> HashMap<String, i32> {
    let mut m = HashMap::new();
    for vi in gp.input.iter().chain(&gp.output).chain(&gp.value_info) {
        if let (Some(n), Some(type_proto::Value::TensorType(t))) =
            (&vi.name, vi.r#type.as_ref().and_then(|t| t.value.as_ref()))
        {
            m.insert(n.clone(), t.elem_type.unwrap_or(0));
        }
    }
    for t in &gp.initializer {
        if let (Some(n), Some(c)) = (&t.name, t.data_type) {
            m.insert(n.clone(), c);
        }
    }
    m
}

/// Fails with every unsupported op type and its count, so users see the whole gap at once.
fn check_supported(nodes: &[NodeProto]) -> Result<()> {
    let mut missing: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes {
        let ty = n.op_type.clone().unwrap_or_default();
        let domain = n.domain.clone().unwrap_or_default();
        let key = match domain.as_str() {
            "" | "ai.onnx" if ops::lookup(&ty).is_some() => continue,
            "" | "ai.onnx" => ty,
            d => format!("{d}.{ty}"),
        };
        *missing.entry(key).or_default() += 1;
    }
    if missing.is_empty() {
        return Ok(());
    }
    let mut list: Vec<(String, usize)> = missing.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let parts: Vec<String> = list.iter().map(|(t, n)| format!("{t} \u{d7}{n}")).collect();
    Err(Error::unsupported(
        OP,
        format!(
            "model uses {} unsupported op type{}: {}",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            parts.join(", ")
        ),
    ))
}

/// What `vi` declares, as the importer reads it: a negative `dim_value` or an empty
/// `dim_param` is an unknown dim; a type mpsrt cannot hold (or none) is no element type.
fn declared(vi: &ValueInfoProto) -> Declared {
    use crate::proto::tensor_shape_proto::dimension::Value;
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Declared::default();
    };
    let dim = |d: &crate::proto::tensor_shape_proto::Dimension| match &d.value {
        Some(Value::DimValue(v)) if *v >= 0 => Some(Dim::Known(*v as usize)),
        Some(Value::DimParam(p)) if !p.is_empty() => Some(Dim::Sym(p.clone())),
        _ => None,
    };
    Declared {
        elem: t.elem_type.and_then(|c| elem_type(c, "").ok()),
        shape: t.shape.as_ref().map(|s| s.dim.iter().map(dim).collect()),
    }
}

/// dtype and symbolic shape of a graph input (`decl` is what [`declared`] read from `vi`).
/// Unknown dims get a symbol named after the input.
fn value_type(vi: &ValueInfoProto, decl: &Declared) -> Result<(DType, Vec<Dim>)> {
    let name = vi.name.clone().unwrap_or_default();
    let what = format!("input {name:?}");
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(Error::unsupported(
            OP,
            format!("{what} is not a tensor (sequences, maps and optionals are not supported)"),
        ));
    };
    let dtype = map_dtype(t.elem_type.unwrap_or(0), &what)?;
    let shape = decl
        .shape
        .as_ref()
        .ok_or_else(|| Error::unsupported(OP, format!("{what} has no shape (unknown rank)")))?;
    let dims = shape.iter().enumerate();
    Ok((
        dtype,
        dims.map(|(i, d)| d.clone().unwrap_or_else(|| Dim::Sym(format!("{name}:{i}")))).collect(),
    ))
}
