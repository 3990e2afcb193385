//! `com.microsoft` contrib ops, rewritten into default-domain ONNX nodes before the importer
//! sees them, so the engine runs them without knowing ORT's contrib domain. ORT's transformer
//! optimizer (`onnxruntime.transformers`, Optimum's `ORTOptimizer`) saves BERT-like models with
//! these fused ops; ORT's own graph optimizer makes them only for nodes left to its CPU EP
//! (its level-2 fusions run after partitioning), so these come from pre-optimized models.
//!
//! Each rewrite keeps the op's semantics as ORT's CPU kernels define them; a variant we do not
//! rewrite (packed QKV layouts, past state, rotary, 1-D mask lengths, optional statistics
//! outputs) is an error here, which makes `GetCapability` leave that node to ORT.

use mpsrt_onnx::proto::attribute_proto::AttributeType;
use mpsrt_onnx::proto::{AttributeProto, NodeProto, TensorProto};

/// Contrib ops (domain `com.microsoft`) with a rewrite.
pub const OPS: &[&str] = &[
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuickGelu",
    "FusedMatMul",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "Attention",
    "MultiHeadAttention",
];

/// ORT registers `SimplifiedLayerNormalization` (RMS norm) in the default domain.
pub const DEFAULT_DOMAIN_OPS: &[&str] = &["SimplifiedLayerNormalization"];

pub fn is_contrib(domain: &str, op: &str) -> bool {
    (domain == "com.microsoft" && OPS.contains(&op))
        || (matches!(domain, "" | "ai.onnx") && DEFAULT_DOMAIN_OPS.contains(&op))
}

/// What a rewrite needs to know about the values around a node.
pub struct Known<'a> {
    /// Rank of a value, where ORT's type information or an initializer gives it.
    pub rank: &'a dyn Fn(&str) -> Option<usize>,
    /// Dims of a constant initializer.
    pub dims: &'a dyn Fn(&str) -> Option<Vec<i64>>,
}

/// A rewrite: the nodes replacing one contrib node and the constants they add.
#[derive(Default)]
pub struct Rewrite {
    pub nodes: Vec<NodeProto>,
    pub constants: Vec<TensorProto>,
}

struct Builder<'a> {
    node: &'a NodeProto,
    out: Rewrite,
    n: usize,
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}
fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}
fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
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
        let base = self.node.output.first().map_or("contrib", String::as_str);
        format!("{base}__mpsrt_{}", self.n)
    }
    fn emit(&mut self, op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) {
        let name = self.node.name.clone().unwrap_or_default();
        self.out.nodes.push(NodeProto {
            op_type: Some(op.into()),
            name: Some(format!("{name}/{op}{}", self.out.nodes.len())),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
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
        self.emit(op, inputs, &o, attrs);
        o
    }
    fn constant_f32(&mut self, v: f32) -> String {
        let name = self.tmp();
        self.out.constants.push(TensorProto {
            name: Some(name.clone()),
            dims: vec![],
            data_type: Some(1),
            raw_data: Some(v.to_le_bytes().to_vec()),
            ..Default::default()
        });
        name
    }
    fn constant_i64(&mut self, v: &[i64]) -> String {
        let name = self.tmp();
        self.out.constants.push(TensorProto {
            name: Some(name.clone()),
            dims: vec![v.len() as i64],
            data_type: Some(7),
            raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            ..Default::default()
        });
        name
    }
    fn refuse(&self, why: impl std::fmt::Display) -> String {
        format!("{} (com.microsoft): {why}", self.op())
    }
    fn need_input(&self, i: usize, what: &str) -> Result<&'a str, String> {
        self.input(i).ok_or_else(|| self.refuse(format!("input {i} ({what}) is missing")))
    }
    /// Outputs past `keep` must be unused (optional statistics or state we do not produce).
    fn only_outputs(&self, keep: &[usize]) -> Result<(), String> {
        for (i, o) in self.node.output.iter().enumerate() {
            if !o.is_empty() && !keep.contains(&i) {
                return Err(self.refuse(format!("optional output {i} ({o:?}) is not produced")));
            }
        }
        Ok(())
    }
    /// Additive mask `(1 - mask) * filter` shaped `[B, 1, 1, S]` from a `[B, S]` 0/1 mask.
    fn padding_mask(&mut self, mask: &str, known: &Known, filter: f32) -> Result<String, String> {
        if (known.rank)(mask) != Some(2) {
            return Err(self.refuse("only a 2-D [batch, sequence] 0/1 mask is rewritten"));
        }
        let m = self.value("Cast", &[mask], vec![int_attr("to", 1)], None);
        let one = self.constant_f32(1.0);
        let inv = self.value("Sub", &[&one, &m], vec![], None);
        let f = self.constant_f32(filter);
        let add = self.value("Mul", &[&inv, &f], vec![], None);
        let shape = self.constant_i64(&[0, 1, 1, -1]);
        Ok(self.value("Reshape", &[&add, &shape], vec![], None))
    }
    /// Last-axis slice `[start, end)` of `x`.
    fn slice_last(&mut self, x: &str, start: i64, end: i64) -> String {
        let s = self.constant_i64(&[start]);
        let e = self.constant_i64(&[end]);
        let a = self.constant_i64(&[-1]);
        self.value("Slice", &[x, &s, &e, &a], vec![], None)
    }
}

/// The default-domain nodes computing `node` (a contrib op listed in [`OPS`] or
/// [`DEFAULT_DOMAIN_OPS`]); an error names what is not rewritten.
pub fn rewrite(node: &NodeProto, opset: i64, known: &Known) -> Result<Rewrite, String> {
    let mut b = Builder { node, out: Rewrite::default(), n: 0 };
    let y = b.output(0).ok_or_else(|| b.refuse("output 0 is unnamed"))?;
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
        "FusedMatMul" => {
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
                let r = (known.rank)(x)
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
        }
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => {
            // Outputs: Y, mean, inv_std_var, input + skip (+ bias).
            b.only_outputs(&[0, 3])?;
            let simplified = b.op() == "SkipSimplifiedLayerNormalization";
            let x = b.need_input(0, "input")?;
            let skip = b.need_input(1, "skip")?;
            let gamma = b.need_input(2, "gamma")?;
            let (beta, bias) =
                if simplified { (None, b.input(3)) } else { (b.input(3), b.input(4)) };
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
        "Attention" => attention(&mut b, known, y, opset)?,
        "MultiHeadAttention" => multi_head_attention(&mut b, known, y, opset)?,
        other => return Err(b.refuse(format!("{other} has no rewrite"))),
    }
    Ok(b.out)
}

fn common_attention_checks(b: &Builder, opset: i64) -> Result<(i64, Vec<AttributeProto>), String> {
    if opset < 10 {
        return Err(b.refuse(format!("opset {opset} < 10 (Slice takes inputs from 10 on)")));
    }
    if b.int("unidirectional", 0) != 0 {
        return Err(b.refuse("unidirectional (causal) attention is not rewritten"));
    }
    if b.int("do_rotary", 0) != 0 {
        return Err(b.refuse("rotary embeddings are not rewritten"));
    }
    let heads = b.int("num_heads", 0);
    if heads <= 0 {
        return Err(b.refuse("num_heads must be positive"));
    }
    let mut attrs = vec![int_attr("q_num_heads", heads), int_attr("kv_num_heads", heads)];
    if let Some(s) = b.attr("scale").and_then(|a| a.f).filter(|&s| s != 0.0) {
        attrs.push(float_attr("scale", s));
    }
    Ok((heads, attrs))
}

/// `Attention`: packed QKV projection `input @ weights + bias`, split, scaled dot product.
fn attention(b: &mut Builder, known: &Known, y: &str, opset: i64) -> Result<(), String> {
    b.only_outputs(&[0])?;
    let (_, attrs) = common_attention_checks(b, opset)?;
    for (i, what) in [(4, "past"), (5, "attention_bias"), (6, "past_sequence_length")] {
        if b.input(i).is_some() {
            return Err(b.refuse(format!("input {what} is not rewritten")));
        }
    }
    let x = b.need_input(0, "input")?;
    let w = b.need_input(1, "weights")?;
    let wd = (known.dims)(w).filter(|d| d.len() == 2 && d[1] > 0 && d[1] % 3 == 0);
    let hidden = wd.ok_or_else(|| b.refuse("weights must be a constant [in, 3 * hidden]"))?[1] / 3;
    if let Some(a) = b.attr("qkv_hidden_sizes") {
        if a.ints.iter().any(|&h| h != hidden) {
            return Err(b.refuse("unequal qkv_hidden_sizes are not rewritten"));
        }
    }
    let mut qkv = b.value("MatMul", &[x, w], vec![], None);
    if let Some(bias) = b.input(2) {
        qkv = b.value("Add", &[&qkv, bias], vec![], None);
    }
    let q = b.slice_last(&qkv, 0, hidden);
    let k = b.slice_last(&qkv, hidden, 2 * hidden);
    let v = b.slice_last(&qkv, 2 * hidden, 3 * hidden);
    let mut ins = vec![q, k, v];
    if let Some(mask) = b.input(3) {
        let filter = b.float("mask_filter_value", -10000.0);
        ins.push(b.padding_mask(mask, known, filter)?);
    }
    let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
    b.value("Attention", &ins, attrs, Some(y));
    Ok(())
}

/// `MultiHeadAttention` with separate 3-D query, key and value (optionally a packed bias and a
/// 2-D key padding mask).
fn multi_head_attention(b: &mut Builder, known: &Known, y: &str, opset: i64) -> Result<(), String> {
    b.only_outputs(&[0])?;
    let (_, attrs) = common_attention_checks(b, opset)?;
    for (i, what) in [(5, "attention_bias"), (6, "past_key"), (7, "past_value")] {
        if b.input(i).is_some() {
            return Err(b.refuse(format!("input {what} is not rewritten")));
        }
    }
    let q = b.need_input(0, "query")?;
    let k = b.need_input(1, "key")?;
    let v = b.need_input(2, "value")?;
    for x in [q, k, v] {
        if (known.rank)(x) != Some(3) {
            return Err(b.refuse(format!(
                "{x:?} must be 3-D [batch, sequence, hidden] (packed layouts are not rewritten)"
            )));
        }
    }
    let mut qkv = vec![q.to_string(), k.to_string(), v.to_string()];
    if let Some(bias) = b.input(3) {
        let d = (known.dims)(bias).filter(|d| d.len() == 1 && d[0] > 0 && d[0] % 3 == 0);
        let h = d.ok_or_else(|| b.refuse("bias must be a constant [3 * hidden]"))?[0] / 3;
        for (i, x) in qkv.iter_mut().enumerate() {
            let part = b.slice_last(bias, i as i64 * h, (i as i64 + 1) * h);
            *x = b.value("Add", &[x.as_str(), &part], vec![], None);
        }
    }
    if let Some(mask) = b.input(4) {
        let filter = b.float("mask_filter_value", -10000.0);
        qkv.push(b.padding_mask(mask, known, filter)?);
    }
    let ins: Vec<&str> = qkv.iter().map(String::as_str).collect();
    b.value("Attention", &ins, attrs, Some(y));
    Ok(())
}
