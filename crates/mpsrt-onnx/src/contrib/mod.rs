//! `com.microsoft` contrib ops, rewritten into default-domain ONNX nodes before import, so models
//! saved by ONNX Runtime's transformer optimizer (`onnxruntime.transformers`, Optimum's
//! `ORTOptimizer`) and exported LLMs (onnxruntime-genai builders: `GroupQueryAttention`,
//! `MatMulNBits`) load in `mpsrt run`, `mpsrt.onnx.InferenceSession` and the ONNX Runtime plugin
//! EP alike, without the engine knowing ORT's contrib domain.
//!
//! Each rewrite keeps the op's semantics as ORT's CPU kernels define them
//! (`docs/ContribOperators.md`); a variant we do not rewrite (rotary Attention, 4-D Megatron
//! masks, smooth softmax, shared past/present KV buffers, ...) is an error naming the op and the
//! reason, which makes the EP's `GetCapability` leave that node to ORT and the importer report it.
//! The node families live in `attention.rs` (Attention, MultiHeadAttention,
//! GroupQueryAttention) and `quant.rs` (MatMulNBits); the rest are here.

mod attention;
mod quant;

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};
use mpsrt_core::{Error, Result};
use mpsrt_graph::HostTensor;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Contrib ops (domain `com.microsoft`) with a rewrite.
pub const OPS: &[&str] = &[
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuickGelu",
    "FusedMatMul",
    "FusedConv",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "EmbedLayerNormalization",
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "RotaryEmbedding",
    "MatMulNBits",
];

/// ORT registers `SimplifiedLayerNormalization` (RMS norm) in the default domain.
pub const DEFAULT_DOMAIN_OPS: &[&str] = &["SimplifiedLayerNormalization"];

/// Whether `(domain, op)` is a contrib op this module rewrites.
pub fn is_contrib(domain: &str, op: &str) -> bool {
    (domain == "com.microsoft" && OPS.contains(&op))
        || (matches!(domain, "" | "ai.onnx") && DEFAULT_DOMAIN_OPS.contains(&op))
}

fn node_is_contrib(n: &NodeProto) -> bool {
    is_contrib(n.domain.as_deref().unwrap_or(""), n.op_type.as_deref().unwrap_or(""))
}

/// What a rewrite needs to know about the values around a node.
pub struct Known<'a> {
    /// Declared dims of a value (a number, a symbol, or "" when unknown), where the model's
    /// value infos or an initializer give them; its length is the value's rank.
    pub dims: &'a dyn Fn(&str) -> Option<Vec<String>>,
    /// The data of a constant initializer (external data resolved).
    pub constant: &'a dyn Fn(&str) -> Option<HostTensor>,
}

impl Known<'_> {
    fn rank(&self, name: &str) -> Option<usize> {
        (self.dims)(name).map(|d| d.len())
    }
    /// Dims of a constant initializer.
    fn const_dims(&self, name: &str) -> Option<Vec<usize>> {
        (self.constant)(name).map(|t| t.shape)
    }
}

/// A rewrite: the nodes replacing one contrib node and the constants they add.
#[derive(Default)]
pub struct Rewrite {
    pub nodes: Vec<NodeProto>,
    pub constants: Vec<TensorProto>,
}

/// A graph with its contrib nodes rewritten: the nodes to import, the constants the rewrites
/// added, and the initializers no node reads any more (MatMulNBits' packed weights).
pub struct Expanded<'g> {
    pub nodes: Cow<'g, [NodeProto]>,
    pub constants: Vec<TensorProto>,
    pub unused: HashSet<String>,
}

/// Rewrites every contrib node of `gp` (nothing is copied when there is none). `base_dir`
/// resolves external initializer data the rewrites read (MatMulNBits weights).
pub fn expand<'g>(gp: &'g GraphProto, opset: i64, base_dir: Option<&Path>) -> Result<Expanded<'g>> {
    if !gp.node.iter().any(node_is_contrib) {
        return Ok(Expanded {
            nodes: Cow::Borrowed(&gp.node),
            constants: vec![],
            unused: HashSet::new(),
        });
    }
    use crate::proto::tensor_shape_proto::dimension::Value;
    use crate::proto::type_proto;
    let mut dims: HashMap<String, Vec<String>> = HashMap::new();
    for vi in gp.input.iter().chain(&gp.output).chain(&gp.value_info) {
        if let (Some(n), Some(type_proto::Value::TensorType(t))) =
            (&vi.name, vi.r#type.as_ref().and_then(|t| t.value.as_ref()))
        {
            if let Some(s) = &t.shape {
                let d = s.dim.iter().map(|d| match &d.value {
                    Some(Value::DimValue(v)) if *v >= 0 => v.to_string(),
                    Some(Value::DimParam(p)) => p.clone(),
                    _ => String::new(),
                });
                dims.insert(n.clone(), d.collect());
            }
        }
    }
    let inits: HashMap<&str, &TensorProto> =
        gp.initializer.iter().filter_map(|t| Some((t.name.as_deref()?, t))).collect();
    for (n, t) in &inits {
        dims.insert(n.to_string(), t.dims.iter().map(i64::to_string).collect());
    }
    infer_ranks(gp, &inits, &mut dims);
    let constant = |name: &str| -> Option<HostTensor> {
        crate::tensor::to_host(inits.get(name)?, base_dir).ok()
    };
    let dim = |name: &str| dims.get(name).cloned();
    let known = Known { dims: &dim, constant: &constant };
    let (mut nodes, mut constants) = (Vec::with_capacity(gp.node.len()), Vec::new());
    let mut consumed: HashSet<String> = HashSet::new();
    for n in &gp.node {
        if !node_is_contrib(n) {
            nodes.push(n.clone());
            continue;
        }
        let r = rewrite(n, opset, &known).map_err(|e| {
            let name = n.name.clone().filter(|s| !s.is_empty()).unwrap_or_default();
            Error::unsupported(format!("{} {name}", n.op_type.as_deref().unwrap_or("")).trim(), e)
        })?;
        consumed.extend(n.input.iter().filter(|i| inits.contains_key(i.as_str())).cloned());
        constants.extend(r.constants);
        nodes.extend(r.nodes);
    }
    // Initializers only a rewritten node read and no rewrite reads now (packed weights).
    let read: HashSet<&str> = nodes
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .chain(gp.output.iter().filter_map(|o| o.name.as_deref()))
        .collect();
    consumed.retain(|c| !read.contains(c.as_str()));
    Ok(Expanded { nodes: Cow::Owned(nodes), constants, unused: consumed })
}

/// Ranks of values the model declares no shape for, through the ops that produce ORT's
/// `mask_index` and other attention inputs (a value's rank picks the mask form): elementwise
/// ops, casts, reductions, reshapes with constant targets, (un)squeezes, Gather, and
/// EmbedLayerNormalization's outputs. Graphs are in topological order, so one pass suffices.
fn infer_ranks(
    gp: &GraphProto,
    inits: &HashMap<&str, &TensorProto>,
    dims: &mut HashMap<String, Vec<String>>,
) {
    let const_ints = |name: &str| -> Option<Vec<i64>> {
        let t = inits.get(name).filter(|t| t.dims.iter().product::<i64>() <= 64)?;
        let h = crate::tensor::to_host(t, None).ok()?;
        Some(h.to_f64_vec().into_iter().map(|v| v as i64).collect())
    };
    for n in &gp.node {
        let op = n.op_type.as_deref().unwrap_or("");
        let rank = |i: usize| n.input.get(i).and_then(|x| dims.get(x)).map(Vec::len);
        let attr = |name: &str| n.attribute.iter().find(|a| a.name.as_deref() == Some(name));
        let axes = || attr("axes").map(|a| a.ints.clone()).or_else(|| const_ints(n.input.get(1)?));
        let out: Vec<Option<usize>> = match (n.domain.as_deref().unwrap_or(""), op) {
            ("com.microsoft", "EmbedLayerNormalization") => vec![Some(3), Some(1), Some(3)],
            ("com.microsoft", _) => vec![rank(0)],
            (_, "Cast" | "Identity" | "Not" | "Neg" | "Abs" | "Relu" | "Sigmoid" | "Tanh") => {
                vec![rank(0)]
            }
            (
                _,
                "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Greater" | "Less" | "And" | "Or"
                | "Where" | "GreaterOrEqual" | "LessOrEqual" | "Pow",
            ) => vec![(0..n.input.len()).map(rank).try_fold(0, |m, r| r.map(|r| r.max(m)))],
            (_, "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" | "ReduceProd") => {
                let keep = attr("keepdims").and_then(|a| a.i).unwrap_or(1) != 0;
                vec![match (keep, axes()) {
                    (true, _) => rank(0),
                    (false, Some(a)) if !a.is_empty() => rank(0).map(|r| r.saturating_sub(a.len())),
                    (false, _) => Some(0),
                }]
            }
            (_, "Reshape") => vec![n.input.get(1).and_then(|s| const_ints(s)).map(|s| s.len())],
            (_, "Unsqueeze") => vec![rank(0).zip(axes()).map(|(r, a)| r + a.len())],
            (_, "Squeeze") => vec![rank(0).zip(axes()).map(|(r, a)| r.saturating_sub(a.len()))],
            (_, "Gather") => vec![rank(0).zip(rank(1)).map(|(d, i)| (d + i).saturating_sub(1))],
            _ => vec![],
        };
        for (o, r) in n.output.iter().zip(out) {
            if let (false, Some(r)) = (o.is_empty(), r) {
                dims.entry(o.clone()).or_insert_with(|| vec![String::new(); r]);
            }
        }
    }
}

pub(crate) struct Builder<'a> {
    node: &'a NodeProto,
    opset: i64,
    out: Rewrite,
    n: usize,
}

pub(crate) fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}
pub(crate) fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}
pub(crate) fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}
fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

impl<'a> Builder<'a> {
    fn op(&self) -> &str {
        self.node.op_type.as_deref().unwrap_or("")
    }
    fn input(&self, i: usize) -> Option<&'a str> {
        self.node.input.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }
    fn output(&self, i: usize) -> Option<&'a str> {
        self.node.output.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }
    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name.as_deref() == Some(name))
    }
    fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i).unwrap_or(default)
    }
    fn float(&self, name: &str, default: f32) -> f32 {
        self.attr(name).and_then(|a| a.f).unwrap_or(default)
    }
    /// A fresh value name for an intermediate.
    fn tmp(&mut self) -> String {
        self.n += 1;
        let base =
            self.node.output.iter().find(|o| !o.is_empty()).map_or("contrib", String::as_str);
        format!("{base}__mpsrt_{}", self.n)
    }
    fn emit_multi(
        &mut self,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) {
        let name = self.node.name.clone().unwrap_or_default();
        self.out.nodes.push(NodeProto {
            op_type: Some(op.into()),
            name: Some(format!("{name}/{op}{}", self.out.nodes.len())),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
    }
    /// `op(inputs)` into a fresh value (or `out` when given).
    fn value(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        out: Option<&str>,
    ) -> String {
        let o = out.map_or_else(|| self.tmp(), str::to_string);
        self.emit_multi(op, inputs, &[&o], attrs);
        o
    }
    fn constant(&mut self, t: TensorProto) -> String {
        let name = self.tmp();
        self.out.constants.push(TensorProto { name: Some(name.clone()), ..t });
        name
    }
    fn constant_f32(&mut self, v: f32) -> String {
        self.constant(TensorProto {
            data_type: Some(1),
            raw_data: Some(v.to_le_bytes().to_vec()),
            ..Default::default()
        })
    }
    fn constant_i64(&mut self, v: &[i64]) -> String {
        self.constant(TensorProto {
            dims: vec![v.len() as i64],
            data_type: Some(7),
            raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            ..Default::default()
        })
    }
    fn scalar_i64(&mut self, v: i64) -> String {
        self.constant(TensorProto {
            data_type: Some(7),
            raw_data: Some(v.to_le_bytes().to_vec()),
            ..Default::default()
        })
    }
    fn refuse(&self, why: impl std::fmt::Display) -> String {
        format!("{} (com.microsoft): {why}", self.op())
    }
    fn need_input(&self, i: usize, what: &str) -> std::result::Result<&'a str, String> {
        self.input(i).ok_or_else(|| self.refuse(format!("input {i} ({what}) is missing")))
    }
    /// Outputs other than `keep` must be unused (optional statistics or state we do not produce).
    fn only_outputs(&self, keep: &[usize]) -> std::result::Result<(), String> {
        for (i, o) in self.node.output.iter().enumerate() {
            if !o.is_empty() && !keep.contains(&i) {
                return Err(self.refuse(format!("optional output {i} ({o:?}) is not produced")));
            }
        }
        Ok(())
    }
    /// Inputs at `idx` must be absent.
    fn no_inputs(&self, idx: &[(usize, &str)]) -> std::result::Result<(), String> {
        for &(i, what) in idx {
            if self.input(i).is_some() {
                return Err(self.refuse(format!("input {i} ({what}) is not rewritten")));
            }
        }
        Ok(())
    }
    /// Slice `[start, end)` of `x` along `axis` (constant bounds).
    fn slice(&mut self, x: &str, axis: i64, start: i64, end: i64) -> String {
        let s = self.constant_i64(&[start]);
        let e = self.constant_i64(&[end]);
        let a = self.constant_i64(&[axis]);
        self.value("Slice", &[x, &s, &e, &a], vec![], None)
    }
    fn slice_last(&mut self, x: &str, start: i64, end: i64) -> String {
        self.slice(x, -1, start, end)
    }
    /// Dim `axis` of `x` as a 1-element int64 tensor.
    fn dim(&mut self, x: &str, axis: i64) -> String {
        let s = self.value("Shape", &[x], vec![], None);
        self.slice(&s, 0, axis, axis + 1)
    }
    fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let s = self.constant_i64(shape);
        self.value("Reshape", &[x, &s], vec![], None)
    }
    /// `x` with size-1 axes inserted (attribute or input form by opset).
    fn unsqueeze(&mut self, x: &str, axes: &[i64]) -> String {
        if self.opset >= 13 {
            let a = self.constant_i64(axes);
            self.value("Unsqueeze", &[x, &a], vec![], None)
        } else {
            self.value("Unsqueeze", &[x], vec![ints_attr("axes", axes)], None)
        }
    }
    /// Sum over `axes` without keeping them.
    fn reduce_sum(&mut self, x: &str, axes: &[i64]) -> String {
        let keep = int_attr("keepdims", 0);
        if self.opset >= 13 {
            let a = self.constant_i64(axes);
            self.value("ReduceSum", &[x, &a], vec![keep], None)
        } else {
            self.value("ReduceSum", &[x], vec![ints_attr("axes", axes), keep], None)
        }
    }
    fn cast(&mut self, x: &str, to: i64) -> String {
        self.value("Cast", &[x], vec![int_attr("to", to)], None)
    }
    /// `0..n` (int64) for a 1-element int64 `n`.
    fn range(&mut self, n: &str) -> String {
        let scalar = self.reshape(n, &[]);
        let zero = self.scalar_i64(0);
        let one = self.scalar_i64(1);
        self.value("Range", &[&zero, &scalar, &one], vec![], None)
    }
}

/// The default-domain nodes computing `node` (a contrib op listed in [`OPS`] or
/// [`DEFAULT_DOMAIN_OPS`]); an error names what is not rewritten.
pub fn rewrite(
    node: &NodeProto,
    opset: i64,
    known: &Known,
) -> std::result::Result<Rewrite, String> {
    let mut b = Builder { node, opset, out: Rewrite::default(), n: 0 };
    let y = b.output(0).ok_or_else(|| b.refuse("output 0 is unnamed"))?;
    if opset < 11 {
        return Err(b.refuse(format!("opset {opset} < 11 (the rewrites use opset 11 forms)")));
    }
    match b.op().to_string().as_str() {
        "Gelu" => {
            b.only_outputs(&[0])?;
            let x = b.need_input(0, "X")?;
            b.value("Gelu", &[x], vec![], Some(y));
        }
        "FastGelu" | "BiasGelu" => {
            b.only_outputs(&[0])?;
            let mut x = b.need_input(0, "X")?.to_string();
            if let Some(bias) = b.input(1) {
                x = b.value("Add", &[&x, bias], vec![], None);
            }
            let approx = if b.op() == "FastGelu" { "tanh" } else { "none" };
            b.value("Gelu", &[&x], vec![string_attr("approximate", approx)], Some(y));
        }
        "QuickGelu" => {
            b.only_outputs(&[0])?;
            let x = b.need_input(0, "X")?;
            let alpha = b.constant_f32(b.float("alpha", 1.702));
            let ax = b.value("Mul", &[x, &alpha], vec![], None);
            let s = b.value("Sigmoid", &[&ax], vec![], None);
            b.value("Mul", &[x, &s], vec![], Some(y));
        }
        "FusedMatMul" => fused_matmul(&mut b, known, y)?,
        "FusedConv" => fused_conv(&mut b, y)?,
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => {
            skip_layer_norm(&mut b, y)?
        }
        "SimplifiedLayerNormalization" => {
            b.only_outputs(&[0])?;
            let x = b.need_input(0, "X")?;
            let scale = b.need_input(1, "scale")?;
            let attrs = vec![
                int_attr("axis", b.int("axis", -1)),
                float_attr("epsilon", b.float("epsilon", 1e-5)),
            ];
            b.value("RMSNormalization", &[x, scale], attrs, Some(y));
        }
        "EmbedLayerNormalization" => embed_layer_norm(&mut b, y)?,
        "Attention" => attention::attention(&mut b, known, y)?,
        "MultiHeadAttention" => attention::multi_head_attention(&mut b, known, y)?,
        "GroupQueryAttention" => attention::group_query_attention(&mut b, known, y)?,
        "RotaryEmbedding" => attention::rotary_embedding(&mut b, known, y)?,
        "MatMulNBits" => quant::matmul_nbits(&mut b, known, y)?,
        other => return Err(b.refuse(format!("{other} has no rewrite"))),
    }
    Ok(b.out)
}

fn fused_matmul(b: &mut Builder, known: &Known, y: &str) -> std::result::Result<(), String> {
    b.only_outputs(&[0])?;
    if b.int("transBatchA", 0) != 0 || b.int("transBatchB", 0) != 0 {
        return Err(b.refuse("transBatchA/transBatchB are not rewritten"));
    }
    let mut operands = Vec::new();
    for (i, t) in [(0, "transA"), (1, "transB")] {
        let x = b.need_input(i, if i == 0 { "A" } else { "B" })?;
        if b.int(t, 0) == 0 {
            operands.push(x.to_string());
            continue;
        }
        let r = known
            .rank(x)
            .filter(|&r| r >= 2)
            .ok_or_else(|| b.refuse(format!("{t} needs the rank of {x:?}")))?;
        let mut perm: Vec<i64> = (0..r as i64).collect();
        perm.swap(r - 2, r - 1);
        operands.push(b.value("Transpose", &[x], vec![ints_attr("perm", &perm)], None));
    }
    let alpha = b.float("alpha", 1.0);
    if alpha == 1.0 {
        b.value("MatMul", &[&operands[0], &operands[1]], vec![], Some(y));
    } else {
        let p = b.value("MatMul", &[&operands[0], &operands[1]], vec![], None);
        let a = b.constant_f32(alpha);
        b.value("Mul", &[&p, &a], vec![], Some(y));
    }
    Ok(())
}

/// `FusedConv`: Conv (+ the optional `Z` summand) followed by the `activation` attribute's op
/// with its `activation_params` (ORT's `MLAS_ACTIVATION` kinds).
fn fused_conv(b: &mut Builder, y: &str) -> std::result::Result<(), String> {
    b.only_outputs(&[0])?;
    let x = b.need_input(0, "X")?;
    let w = b.need_input(1, "W")?;
    let act = b
        .attr("activation")
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default();
    let params: Vec<f32> =
        b.attr("activation_params").map(|a| a.floats.clone()).unwrap_or_default();
    let param = |i: usize, what: &str| {
        params.get(i).copied().ok_or_else(|| {
            b.refuse(format!("activation {act} needs activation_params[{i}] ({what})"))
        })
    };
    let act_attrs: Vec<AttributeProto> = match act.as_str() {
        "" | "Relu" | "Tanh" | "Sigmoid" | "Clip" => vec![],
        "LeakyRelu" => vec![float_attr("alpha", param(0, "alpha")?)],
        "HardSigmoid" => {
            vec![float_attr("alpha", param(0, "alpha")?), float_attr("beta", param(1, "beta")?)]
        }
        other => return Err(b.refuse(format!("activation {other:?} is not rewritten"))),
    };
    let clip = if act == "Clip" { Some((param(0, "min")?, param(1, "max")?)) } else { None };
    let conv_attrs: Vec<AttributeProto> = b
        .node
        .attribute
        .iter()
        .filter(|a| !matches!(a.name.as_deref(), Some("activation" | "activation_params")))
        .cloned()
        .collect();
    let ins: Vec<&str> = [Some(x), Some(w), b.input(2)].into_iter().flatten().collect();
    let has_z = b.input(3).is_some();
    let direct = act.is_empty() && !has_z;
    let mut v = b.value("Conv", &ins, conv_attrs, direct.then_some(y));
    if let Some(z) = b.input(3) {
        v = b.value("Add", &[&v, z], vec![], act.is_empty().then_some(y));
    }
    match (act.as_str(), clip) {
        ("", _) => {}
        (_, Some((lo, hi))) => {
            let lo = b.constant_f32(lo);
            let hi = b.constant_f32(hi);
            // Clip's bounds take the input's type: cast them like the conv output.
            let lo = b.value("CastLike", &[&lo, &v], vec![], None);
            let hi = b.value("CastLike", &[&hi, &v], vec![], None);
            b.value("Clip", &[&v, &lo, &hi], vec![], Some(y));
        }
        (op, None) => {
            b.value(op, &[&v], act_attrs, Some(y));
        }
    }
    Ok(())
}

fn skip_layer_norm(b: &mut Builder, y: &str) -> std::result::Result<(), String> {
    // Outputs: Y, mean, inv_std_var, input + skip (+ bias).
    b.only_outputs(&[0, 3])?;
    let simplified = b.op() == "SkipSimplifiedLayerNormalization";
    let x = b.need_input(0, "input")?;
    let skip = b.need_input(1, "skip")?;
    let gamma = b.need_input(2, "gamma")?;
    let (beta, bias) = if simplified { (None, b.input(3)) } else { (b.input(3), b.input(4)) };
    let sum_out = b.output(3);
    let sum = match bias {
        Some(bias) => {
            let s = b.value("Add", &[x, skip], vec![], None);
            b.value("Add", &[&s, bias], vec![], sum_out)
        }
        None => b.value("Add", &[x, skip], vec![], sum_out),
    };
    let eps = float_attr("epsilon", b.float("epsilon", 1e-12));
    let axis = int_attr("axis", -1);
    if simplified {
        b.value("RMSNormalization", &[&sum, gamma], vec![axis, eps], Some(y));
    } else {
        let ins: Vec<&str> =
            [Some(sum.as_str()), Some(gamma), beta].into_iter().flatten().collect();
        b.value("LayerNormalization", &ins, vec![axis, eps], Some(y));
    }
    Ok(())
}

/// `EmbedLayerNormalization`: word + position (+ segment) embeddings, layer-normalized; the
/// optional `mask_index` output counts each row's mask entries equal to 1 (zeros without a
/// mask), and `embedding_sum` is the sum before the norm.
fn embed_layer_norm(b: &mut Builder, y: &str) -> std::result::Result<(), String> {
    b.only_outputs(&[0, 1, 2])?;
    let ids = b.need_input(0, "input_ids")?;
    let word = b.need_input(2, "word_embedding")?;
    let pos_table = b.need_input(3, "position_embedding")?;
    let gamma = b.need_input(5, "gamma")?;
    let beta = b.need_input(6, "beta")?;
    if b.input(1).is_some() != b.input(4).is_some() {
        return Err(b.refuse("segment_ids and segment_embedding must be given together"));
    }
    let gather =
        |b: &mut Builder, table: &str, idx: &str| b.value("Gather", &[table, idx], vec![], None);
    let mut sum = gather(b, word, ids);
    let pos = match b.input(8) {
        Some(p) => gather(b, pos_table, p),
        None => {
            // Positions 0..S: the table's first S rows, broadcast over the batch.
            let s = b.dim(ids, 1);
            let zero = b.constant_i64(&[0]);
            let axis = b.constant_i64(&[0]);
            b.value("Slice", &[pos_table, &zero, &s, &axis], vec![], None)
        }
    };
    sum = b.value("Add", &[&sum, &pos], vec![], None);
    if let (Some(seg), Some(table)) = (b.input(1), b.input(4)) {
        let e = gather(b, table, seg);
        sum = b.value("Add", &[&sum, &e], vec![], None);
    }
    if let Some(out) = b.output(2) {
        sum = b.value("Identity", &[&sum], vec![], Some(out));
    }
    let eps = float_attr("epsilon", b.float("epsilon", 1e-12));
    b.value("LayerNormalization", &[&sum, gamma, beta], vec![int_attr("axis", -1), eps], Some(y));
    if let Some(out) = b.output(1) {
        let counted = match b.input(7) {
            Some(mask) => {
                let one = b.constant(TensorProto {
                    data_type: Some(6),
                    raw_data: Some(1i32.to_le_bytes().to_vec()),
                    ..Default::default()
                });
                let mask = b.cast(mask, 6);
                let eq = b.value("Equal", &[&mask, &one], vec![], None);
                b.cast(&eq, 6)
            }
            None => {
                let first = b.slice(ids, 1, 0, 1);
                let zero = b.value("Sub", &[&first, &first], vec![], None);
                b.cast(&zero, 6)
            }
        };
        let n = b.reduce_sum(&counted, &[1]);
        b.value("Cast", &[&n], vec![int_attr("to", 6)], Some(out));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::proto::tensor_shape_proto::{dimension, Dimension};
    use crate::proto::{
        type_proto, ModelProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };

    use super::*;

    fn tensor(name: &str, data_type: i32, dims: &[i64], raw: Vec<u8>) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(data_type),
            raw_data: Some(raw),
            ..Default::default()
        }
    }

    fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
        let dim = dims
            .iter()
            .map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), denotation: None })
            .collect();
        let t = type_proto::Tensor { elem_type: Some(1), shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(t)),
                denotation: None,
            }),
            ..Default::default()
        }
    }

    fn model(node: NodeProto, inputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> ModelProto {
        let opset = |d: &str, v| OperatorSetIdProto { domain: Some(d.into()), version: Some(v) };
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![opset("", 17), opset("com.microsoft", 1)],
            graph: Some(GraphProto {
                output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
                node: vec![node],
                input: inputs,
                initializer: inits,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ms_node(op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            domain: Some("com.microsoft".into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec!["y".into()],
            attribute: attrs,
            ..Default::default()
        }
    }

    #[test]
    fn matmul_nbits_weights_are_dequantized_once_and_the_packed_ones_dropped() {
        // K = 16 (one block), N = 2; every 4-bit code is 9, zero point 8, scale 0.5 → W = 0.5.
        let b = tensor("B", 2, &[2, 1, 8], vec![0x99; 16]);
        let scales =
            tensor("scales", 1, &[2], [0.5f32, 0.5].iter().flat_map(|v| v.to_le_bytes()).collect());
        let attrs = vec![
            int_attr("K", 16),
            int_attr("N", 2),
            int_attr("bits", 4),
            int_attr("block_size", 16),
        ];
        let node = ms_node("MatMulNBits", &["a", "B", "scales"], attrs);
        let m =
            crate::import_model(&model(node, vec![input("a", &[3, 16])], vec![b, scales]), None)
                .unwrap();
        assert!(m.graph.find("B").is_none() && m.graph.find("scales").is_none());
        let w: Vec<f64> = m.graph.initializers.values().flat_map(|t| t.to_f64_vec()).collect();
        assert_eq!(w, vec![0.5; 32]);
    }

    #[test]
    fn a_variant_without_a_rewrite_is_an_error_naming_the_op_and_why() {
        let attrs = vec![int_attr("num_heads", 2), int_attr("do_rotary", 1)];
        let w = tensor("w", 1, &[4, 12], vec![0; 4 * 12 * 4]);
        let node = ms_node("Attention", &["x", "w"], attrs);
        let e = crate::import_model(&model(node, vec![input("x", &[1, 3, 4])], vec![w]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Attention") && e.contains("do_rotary"), "{e}");
        let node = ms_node("Rfft", &["x"], vec![]);
        let e = crate::import_model(&model(node, vec![input("x", &[4])], vec![]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("com.microsoft.Rfft"), "{e}");
    }
}
