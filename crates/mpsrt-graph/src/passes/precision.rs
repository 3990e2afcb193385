//! `precision=f16` for float32 models (issue 23): rewrites a graph so its heavy ops (Conv,
//! MatMul, Gemm, elementwise chains, pooling, data movement, LayerNormalization's rows — its
//! statistics stay f32 in the engine) read and write float16 while the
//! numerically sensitive ones keep float32 — Softmax/LogSoftmax, the other normalizations, reductions
//! (including global pooling), cumulative sums/products, Exp/Log/Pow/Softplus, attention, losses —
//! and so does everything outside a known-safe list. Casts are inserted on the boundaries, once
//! per value and direction. The graph's inputs and outputs keep their float32 types (the caller
//! feeds and reads f32, as with onnxruntime's `keep_io_types`).
//!
//! Float32 initializers read only by f16 nodes are converted in place (weights are held in f16
//! from load on: half the memory and bandwidth); one read by both kinds gets an f16 copy. Values
//! computed from constants only (light models' `ConstantOfShape` weights, BatchNorm folds) stay
//! f32 and are cast once: the planner hoists that cast into the init steps. GPU kernels compute
//! f16 operands in f32 registers (packed storage, f32 arithmetic), so what f16 costs is the
//! rounding of stored values, which the accuracy tests report.

use crate::ir::{Graph, HostTensor, Node, ValueId};
use crate::op::{Op, UnaryOp};
use mpsrt_core::{DType, Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// The precision a float32 model runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// As the model declares (no rewrite).
    #[default]
    F32,
    /// Heavy ops in float16, sensitive ones in float32 (see the module doc).
    F16,
}

impl Precision {
    /// The option's values, for messages and help texts.
    pub const VALUES: &'static str = "\"f32\" or \"f16\"";

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = Error;

    /// `f32`/`fp32`/`float32`/`float`, `f16`/`fp16`/`float16`/`half` (any case).
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" | "float" => Ok(Precision::F32),
            "f16" | "fp16" | "float16" | "half" => Ok(Precision::F16),
            _ => Err(Error::invalid(
                "precision",
                format!("unknown value {s:?} for option precision; expected {}", Self::VALUES),
            )),
        }
    }
}

/// What [`convert_to_f16`] did, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct F16Report {
    /// Nodes now computing in f16.
    pub f16_nodes: usize,
    /// Nodes with float data kept in f32 (sensitive or not on the safe list).
    pub f32_nodes: usize,
    /// Cast nodes inserted.
    pub casts: usize,
    /// Initializers converted (in place or copied).
    pub initializers: usize,
}

/// Ops whose results are safe to store in f16 and that the engine runs on f16 operands.
fn f16_safe(op: &Op) -> bool {
    use UnaryOp::*;
    match op {
        Op::Unary(u) => matches!(
            u,
            Abs | Neg
                | Sqrt
                | Reciprocal
                | Relu
                | Sigmoid
                | Tanh
                | Erf
                | Floor
                | Ceil
                | Round
                | Sin
                | Cos
                | Sign
                | HardSwish
                | Softsign
        ),
        Op::Binary(b) => !b.is_predicate() && !matches!(b, crate::op::BinaryOp::Pow),
        Op::Where
        | Op::Identity
        | Op::Dropout
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Selu { .. }
        | Op::Celu { .. }
        | Op::HardSigmoid { .. }
        | Op::ThresholdedRelu { .. }
        | Op::Gelu { .. }
        | Op::Clip { .. }
        | Op::Swish { .. }
        | Op::Shrink { .. }
        | Op::MatMul
        | Op::Gemm { .. }
        | Op::Conv(_)
        | Op::ConvTranspose(_)
        | Op::MaxPool(_)
        | Op::AveragePool(_)
        | Op::GlobalMaxPool
        | Op::BatchNormalization { .. }
        | Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice
        | Op::Gather { .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Flatten { .. }
        | Op::Expand
        | Op::Pad { .. }
        | Op::Tile
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. } => true,
        // Sensitive (softmax, norms, reductions, global pooling, exp/log/pow, attention,
        // losses) and everything that defines a float type itself (Cast, ConstantOfShape,
        // Range, EyeLike, (De)QuantizeLinear) or is not known to be safe: f32.
        _ => false,
    }
}

/// A LayerNormalization with only its normalized output (no mean / inverse-std outputs): its
/// rows are stored in f16 like a GEMM's while the engine computes the statistics in f32 (the
/// GPU kernel unpacks f16 rows to f32, the composition widens first), so the norm needs no
/// casts around it — two passes per norm that `precision=f16` BERT paid (25 `Cast` steps).
fn f16_norm(n: &Node) -> bool {
    matches!(n.op, Op::LayerNormalization { .. }) && n.outputs.len() == 1
}

/// Nodes whose inputs are all constants (or outputs of such nodes): the planner runs them once.
fn constant_nodes(g: &Graph) -> Vec<bool> {
    let mut constant = vec![false; g.values.len()];
    for v in g.initializers.keys() {
        constant[v.0] = true;
    }
    g.nodes
        .iter()
        .map(|n| {
            let c = n.inputs.iter().all(|v| constant[v.0]);
            if c {
                for o in &n.outputs {
                    constant[o.0] = true;
                }
            }
            c
        })
        .collect()
}

/// f32 → f16 bits, rounded to nearest even like NumPy's `astype(float16)` and the GPU's
/// `pack2x16float` (`HostTensor::from_f64` truncates, which is fine for folded constants but
/// doubles the error of every weight).
pub fn f16_bits_rne(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7fff_ffff;
    if a > 0x7f80_0000 {
        return sign | 0x7e00; // NaN
    }
    if a >= 0x477f_f000 {
        return sign | 0x7c00; // >= 65520 rounds to infinity
    }
    if a < 0x3880_0000 {
        // Below 2^-14: a multiple of 2^-24 (f16 subnormal), exact in f64; 1024 is 2^-14.
        let units = (f32::from_bits(a) as f64 * 16_777_216.0).round_ties_even();
        return sign | units as u16;
    }
    let e = (a >> 23) as i32 - 127 + 15;
    let mant = a & 0x7f_ffff;
    let mut h = ((e as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1; // a carry into the exponent is the right result
    }
    sign | h as u16
}

fn to_f16(t: &HostTensor) -> HostTensor {
    let bytes = t.to_f64_vec().into_iter().flat_map(|v| f16_bits_rne(v as f32).to_le_bytes());
    HostTensor { dtype: DType::F16, shape: t.shape.clone(), bytes: bytes.collect() }
}

/// Rewrites `g` (dtypes inferred, e.g. by `propagate`) to compute its safe f32 ops in f16.
/// Re-run shape/dtype inference afterwards (`CompiledGraph::new` does).
pub fn convert_to_f16(g: &mut Graph) -> Result<F16Report> {
    let mut report = F16Report::default();
    let is_f32 = |g: &Graph, v: ValueId| g.value(v).dtype == DType::F32;
    let constant = constant_nodes(g);
    let nodes = std::mem::take(&mut g.nodes);
    // Which nodes run in f16: safe ops with float32 data that are not constant subgraphs.
    let half: Vec<bool> = nodes
        .iter()
        .zip(&constant)
        .map(|(n, &c)| {
            !c && (f16_safe(&n.op) || f16_norm(n))
                && n.inputs.iter().chain(&n.outputs).any(|&v| g.value(v).dtype == DType::F32)
        })
        .collect();
    // Uses of each initializer by f16 / f32 nodes, to convert in place where possible.
    let mut f16_use = vec![false; g.values.len()];
    let mut f32_use = vec![false; g.values.len()];
    for (n, &h) in nodes.iter().zip(&half) {
        for &v in &n.inputs {
            if h {
                f16_use[v.0] = true;
            } else {
                f32_use[v.0] = true;
            }
        }
    }
    for &v in &g.outputs {
        f32_use[v.0] = true;
    }
    let mut in_place = Vec::new();
    for (&v, t) in g.initializers.iter_mut() {
        if t.dtype == DType::F32 && f16_use[v.0] && !f32_use[v.0] {
            *t = to_f16(t);
            in_place.push(v);
        }
    }
    for &v in &in_place {
        g.value_mut(v).dtype = DType::F16;
        report.initializers += 1;
    }
    // Per original f32 value: its f16 twin and, for values f16 nodes produce, its f32 form
    // (`None` until a Cast back is needed; the original id keeps the name and becomes it).
    let mut twin16: HashMap<ValueId, ValueId> = HashMap::new();
    let mut produced16: HashMap<ValueId, bool> = HashMap::new(); // value -> f32 form emitted
    let mut out = Vec::with_capacity(nodes.len() * 2);
    let cast = |out: &mut Vec<Node>, report: &mut F16Report, src, dst, to, name: &str| {
        report.casts += 1;
        out.push(Node {
            op: Op::Cast { to },
            inputs: vec![src],
            outputs: vec![dst],
            name: name.into(),
        });
    };
    for (mut node, h) in nodes.into_iter().zip(half) {
        for k in 0..node.inputs.len() {
            let v = node.inputs[k];
            if h && is_f32(g, v) {
                // Needs the f16 form.
                if let Some(&t) = twin16.get(&v) {
                    node.inputs[k] = t;
                    continue;
                }
                let name = format!("{}__f16", g.value(v).name);
                let t = g.add_temp(&name, DType::F16);
                g.value_mut(t).shape = g.value(v).shape.clone();
                if let Some(init) = g.initializers.get(&v) {
                    let c = to_f16(init);
                    g.initializers.insert(t, c);
                    report.initializers += 1;
                } else {
                    cast(&mut out, &mut report, v, t, DType::F16, &name);
                }
                twin16.insert(v, t);
                node.inputs[k] = t;
            } else if !h {
                // Needs the f32 form: emit the cast back for values an f16 node produced.
                if let Some(emitted) = produced16.get_mut(&v) {
                    if !*emitted {
                        *emitted = true;
                        let name = format!("{}__f32", g.value(v).name);
                        cast(&mut out, &mut report, twin16[&v], v, DType::F32, &name);
                    }
                }
            }
        }
        if h {
            report.f16_nodes += 1;
            for k in 0..node.outputs.len() {
                let v = node.outputs[k];
                if !is_f32(g, v) {
                    continue;
                }
                let t = g.add_temp(&format!("{}__f16", g.value(v).name), DType::F16);
                g.value_mut(t).shape = g.value(v).shape.clone();
                twin16.insert(v, t);
                produced16.insert(v, false);
                node.outputs[k] = t;
            }
        } else if node.inputs.iter().chain(&node.outputs).any(|&v| is_f32(g, v)) {
            report.f32_nodes += 1;
        }
        out.push(node);
    }
    // Graph outputs an f16 node produced: cast back at the end.
    for v in g.outputs.clone() {
        if let Some(false) = produced16.get(&v) {
            produced16.insert(v, true);
            let name = format!("{}__f32", g.value(v).name);
            cast(&mut out, &mut report, twin16[&v], v, DType::F32, &name);
        }
    }
    g.nodes = out;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::f16_bits_rne;

    #[test]
    fn rounds_to_nearest_even() {
        let cases: [(f32, u16); 12] = [
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (1.0 / 3.0, 0x3555), // 0.33325 (truncation gives 0x3555 too; next check differs)
            (1.000_732_4, 0x3c01), // just above half an ulp: rounds up (truncation: 0x3c00)
            (1.000_488_3, 0x3c00), // exactly half an ulp, even below: stays
            (1.001_464_8, 0x3c02), // exactly half an ulp above 0x3c01 (odd): rounds to even
            (65504.0, 0x7bff),
            (65519.0, 0x7bff),
            (65520.0, 0x7c00),
            (5.960_464_5e-8, 0x0001), // 2^-24, smallest subnormal
            (6.097_555e-5, 0x03ff),   // largest subnormal
            (0.0, 0x0000),
        ];
        for (x, want) in cases {
            assert_eq!(f16_bits_rne(x), want, "{x}");
        }
        assert_eq!(f16_bits_rne(f32::NAN) & 0x7e00, 0x7e00);
        assert_eq!(f16_bits_rne(f32::NEG_INFINITY), 0xfc00);
    }
}
