//! Shape and dtype inference for elementwise, linear-algebra and nn ops (shape-manipulation ops
//! live in `infer_shape`). Works on symbolic dims: an output dim that cannot be derived gets a
//! fresh symbol, which specialization later replaces once every input shape is concrete.

use crate::infer_shape;
use crate::ir::{shape_str, Dim, HostTensor, Node};
use crate::op::{AutoPad, ConvAttrs, Op, PoolAttrs};
use mpsrt_core::{normalize_axis, DType, Error, Result};

/// What inference knows about one node input: its type, shape and, when it is a constant (an
/// initializer or a folded value), its contents.
#[derive(Debug, Clone, Copy)]
pub struct InferIn<'a> {
    pub dtype: DType,
    pub shape: &'a [Dim],
    pub value: Option<&'a HostTensor>,
}

/// Inferred type and shape of one output.
pub type OutInfo = (DType, Vec<Dim>);

/// Per-node inference context: names errors after the node and mints fresh symbols.
pub struct Cx<'a> {
    pub node: &'a Node,
    fresh: usize,
}

impl<'a> Cx<'a> {
    pub fn new(node: &'a Node) -> Self {
        Cx { node, fresh: 0 }
    }

    /// `"Conv n12"`: op and node name, the prefix of every error.
    pub fn op(&self) -> String {
        if self.node.name.is_empty() {
            self.node.op.name()
        } else {
            format!("{} {}", self.node.op.name(), self.node.name)
        }
    }

    pub fn shape_err(&self, msg: impl Into<String>) -> Error {
        Error::shape(self.op(), msg)
    }

    pub fn invalid(&self, msg: impl Into<String>) -> Error {
        Error::invalid(self.op(), msg)
    }

    /// A symbol unique to this node output dim, for dims only known at specialization.
    pub fn fresh(&mut self) -> Dim {
        self.fresh += 1;
        let base =
            if self.node.name.is_empty() { self.node.op.name() } else { self.node.name.clone() };
        Dim::Sym(format!("{base}?{}", self.fresh))
    }

    /// Normalizes an axis; rank-0 tensors have no axis to index (mpsrt-core accepts axis 0 there).
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize> {
        if rank == 0 {
            return Err(self.shape_err(format!("axis {axis} given for a rank-0 (scalar) input")));
        }
        normalize_axis(&self.op(), axis as isize, rank)
    }

    /// Requires at least `n` inputs.
    pub fn arity(&self, ins: &[InferIn], n: usize) -> Result<()> {
        if ins.len() < n {
            return Err(self.invalid(format!("expected at least {n} inputs, got {}", ins.len())));
        }
        Ok(())
    }
}

/// Broadcasts two symbolic shapes (NumPy rules). Two different symbols are assumed equal (the
/// first is kept); specialization re-checks with concrete sizes.
pub fn broadcast(cx: &Cx, a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() < n { Dim::Known(1) } else { a[i + a.len() - n].clone() };
        let db = if i + b.len() < n { Dim::Known(1) } else { b[i + b.len() - n].clone() };
        out.push(match (&da, &db) {
            (x, y) if x == y => da,
            (Dim::Known(1), _) => db,
            (_, Dim::Known(1)) => da,
            (Dim::Known(x), Dim::Known(y)) => {
                return Err(cx.shape_err(format!(
                    "shapes {} and {} do not broadcast: dim {i} is {x} vs {y}",
                    shape_str(a),
                    shape_str(b)
                )))
            }
            (Dim::Known(_), Dim::Sym(_)) => da,
            _ => db.clone().known().map(Dim::Known).unwrap_or(da),
        });
    }
    Ok(out)
}

/// Infers output types/shapes of `node` from its inputs.
pub fn infer_node(node: &Node, ins: &[InferIn]) -> Result<Vec<OutInfo>> {
    let mut cx = Cx::new(node);
    let one = |d: DType, s: Vec<Dim>| Ok(vec![(d, s)]);
    match &node.op {
        Op::Unary(u) => {
            cx.arity(ins, 1)?;
            let d = if matches!(u, crate::op::UnaryOp::IsNaN) { DType::Bool } else { ins[0].dtype };
            one(d, ins[0].shape.to_vec())
        }
        Op::Binary(b) => {
            cx.arity(ins, 2)?;
            let s = broadcast(&cx, ins[0].shape, ins[1].shape)?;
            let d = if b.is_predicate() { DType::Bool } else { ins[0].dtype };
            one(d, s)
        }
        Op::Where => {
            cx.arity(ins, 3)?;
            let s = broadcast(&cx, ins[0].shape, ins[1].shape)?;
            one(ins[1].dtype, broadcast(&cx, &s, ins[2].shape)?)
        }
        Op::Cast { to } => {
            cx.arity(ins, 1)?;
            one(*to, ins[0].shape.to_vec())
        }
        Op::Identity
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Selu { .. }
        | Op::Celu { .. }
        | Op::HardSigmoid { .. }
        | Op::ThresholdedRelu { .. }
        | Op::Gelu { .. }
        | Op::Clip { .. }
        | Op::BatchNormalization { .. }
        | Op::InstanceNormalization { .. }
        | Op::Lrn { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::SoftmaxFlat { .. }
        | Op::CumSum { .. }
        | Op::CumProd { .. }
        | Op::Trilu { .. }
        | Op::Swish { .. }
        | Op::Shrink { .. }
        | Op::GroupNormalization { .. }
        | Op::RmsNormalization { .. }
        | Op::LpNormalization { .. }
        | Op::MeanVarianceNormalization { .. }
        | Op::Hardmax { .. } => {
            cx.arity(ins, 1)?;
            one(ins[0].dtype, ins[0].shape.to_vec())
        }
        Op::IsInf { .. } => {
            cx.arity(ins, 1)?;
            one(DType::Bool, ins[0].shape.to_vec())
        }
        Op::EyeLike { dtype, .. } => {
            cx.arity(ins, 1)?;
            if ins[0].shape.len() != 2 {
                return Err(
                    cx.shape_err(format!("input must be 2-D, got {}", shape_str(ins[0].shape)))
                );
            }
            one(dtype.unwrap_or(ins[0].dtype), ins[0].shape.to_vec())
        }
        Op::Einsum { equation } => {
            cx.arity(ins, 1)?;
            let ranks: Vec<usize> = ins.iter().map(|i| i.shape.len()).collect();
            let spec = crate::einsum::parse(equation, &ranks)?;
            let shapes: Vec<&[Dim]> = ins.iter().map(|i| i.shape).collect();
            one(ins[0].dtype, crate::einsum::output_shape(&spec, &shapes)?)
        }
        Op::OneHot { axis, depth } => {
            // Rank grows by one: the depth axis is inserted at `axis` (counted on the output).
            cx.arity(ins, 2)?;
            let mut s = ins[0].shape.to_vec();
            let ax = cx.axis(*axis, s.len() + 1)?;
            s.insert(ax, Dim::Known(*depth));
            one(ins[1].dtype, s)
        }
        Op::TopK { axis, k, .. } => {
            cx.arity(ins, 1)?;
            let mut s = ins[0].shape.to_vec();
            let ax = cx.axis(*axis, s.len())?;
            if s[ax].known().is_some_and(|d| d < *k) {
                return Err(cx.shape_err(format!(
                    "k = {k} exceeds axis {ax} of {}",
                    shape_str(ins[0].shape)
                )));
            }
            s[ax] = Dim::Known(*k);
            Ok(vec![(ins[0].dtype, s.clone()), (DType::I64, s)])
        }
        Op::LayerNormalization { axis, .. } => {
            // Optional outputs Mean and InvStdDev keep the leading dims and 1s after `axis`.
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let ax = cx.axis(*axis, x.len())?;
            let mut stat: Vec<Dim> = x[..ax].to_vec();
            stat.extend(std::iter::repeat_n(Dim::Known(1), x.len() - ax));
            let mut out = vec![(ins[0].dtype, x.to_vec())];
            out.extend(std::iter::repeat_n(
                (DType::F32, stat),
                node.outputs.len().saturating_sub(1),
            ));
            Ok(out)
        }
        Op::NegativeLogLikelihoodLoss { reduction, .. }
        | Op::SoftmaxCrossEntropyLoss { reduction, .. } => {
            // Scores [N, C, d..] and target [N, d..]; SCE's optional log_prob is shaped like x.
            cx.arity(ins, 2)?;
            let (x, t) = (ins[0].shape, ins[1].shape);
            if !ins[1].dtype.is_int() {
                return Err(cx.invalid(format!("target must be integer, got {}", ins[1].dtype)));
            }
            let mut per: Vec<Dim> = x.get(..1).unwrap_or_default().to_vec();
            per.extend(x.get(2..).unwrap_or_default().iter().cloned());
            if x.len() < 2 || t.len() != per.len() {
                return Err(cx.shape_err(format!(
                    "scores {} and target {} are not [N, C, d..] and [N, d..]",
                    shape_str(x),
                    shape_str(t)
                )));
            }
            for (a, b) in per.iter().zip(t) {
                check_eq(&cx, a, b, "scores and target dims")?;
            }
            let loss = if *reduction == crate::op::LossReduction::None { per } else { vec![] };
            let mut out = vec![(ins[0].dtype, loss)];
            if node.outputs.len() > 1 {
                out.push((ins[0].dtype, x.to_vec()));
            }
            Ok(out)
        }
        Op::Attention(a) => crate::attention::infer(&mut cx, a, ins, node.outputs.len()),
        Op::Dropout => {
            cx.arity(ins, 1)?;
            let s = ins[0].shape.to_vec();
            Ok(vec![(ins[0].dtype, s.clone()), (DType::Bool, s)])
        }
        Op::MatMul => {
            cx.arity(ins, 2)?;
            one(ins[0].dtype, matmul(&mut cx, ins[0].shape, ins[1].shape)?)
        }
        Op::Gemm { trans_a, trans_b, .. } => {
            cx.arity(ins, 2)?;
            let (a, b) = (ins[0].shape, ins[1].shape);
            if a.len() != 2 || b.len() != 2 {
                return Err(cx.shape_err(format!(
                    "Gemm needs 2-D inputs, got {} and {}",
                    shape_str(a),
                    shape_str(b)
                )));
            }
            let (m, ka) = if *trans_a { (&a[1], &a[0]) } else { (&a[0], &a[1]) };
            let (kb, n) = if *trans_b { (&b[1], &b[0]) } else { (&b[0], &b[1]) };
            check_eq(&cx, ka, kb, "inner dimensions")?;
            one(ins[0].dtype, vec![m.clone(), n.clone()])
        }
        Op::Conv(c) => {
            cx.arity(ins, 2)?;
            one(ins[0].dtype, conv(&mut cx, c, ins[0].shape, ins[1].shape)?)
        }
        Op::ConvTranspose(c) => {
            cx.arity(ins, 2)?;
            one(ins[0].dtype, conv_transpose(&mut cx, c, ins[0].shape, ins[1].shape)?)
        }
        Op::MaxPool(p) | Op::AveragePool(p) | Op::LpPool { attrs: p, .. } => {
            cx.arity(ins, 1)?;
            let s = pool(&mut cx, p, ins[0].shape)?;
            // MaxPool's optional second output holds int64 indices.
            Ok(node
                .outputs
                .iter()
                .enumerate()
                .map(|(i, _)| (if i == 0 { ins[0].dtype } else { DType::I64 }, s.clone()))
                .collect())
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            if x.len() < 2 {
                return Err(
                    cx.shape_err(format!("input must be [N, C, ...], got {}", shape_str(x)))
                );
            }
            let mut s = x[..2].to_vec();
            s.extend(std::iter::repeat_n(Dim::Known(1), x.len() - 2));
            one(ins[0].dtype, s)
        }
        Op::Reduce { axes, keepdims, noop_with_empty_axes, .. } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let axes: Vec<usize> = match axes {
                Some(a) if !a.is_empty() => {
                    a.iter().map(|&a| cx.axis(a, x.len())).collect::<Result<_>>()?
                }
                _ if *noop_with_empty_axes => return one(ins[0].dtype, x.to_vec()),
                _ => (0..x.len()).collect(),
            };
            let mut s = Vec::new();
            for (i, d) in x.iter().enumerate() {
                if !axes.contains(&i) {
                    s.push(d.clone());
                } else if *keepdims {
                    s.push(Dim::Known(1));
                }
            }
            one(ins[0].dtype, s)
        }
        Op::ArgReduce { axis, keepdims, .. } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let ax = cx.axis(*axis, x.len())?;
            let mut s = x.to_vec();
            if *keepdims {
                s[ax] = Dim::Known(1);
            } else {
                s.remove(ax);
            }
            one(DType::I64, s)
        }
        Op::QuantizeLinear { to, .. } => {
            cx.arity(ins, 2)?;
            one(*to, ins[0].shape.to_vec())
        }
        Op::DequantizeLinear { to, .. } => {
            cx.arity(ins, 2)?;
            one(to.unwrap_or(ins[1].dtype), ins[0].shape.to_vec())
        }
        Op::ScatterElements { .. } | Op::ScatterND { .. } => {
            cx.arity(ins, 3)?;
            one(ins[0].dtype, ins[0].shape.to_vec())
        }
        Op::GatherND { batch_dims } => {
            // data[b.., r..] and indices[b.., q.., k]: output [b.., q.., data dims after b + k].
            cx.arity(ins, 2)?;
            let (x, i, b) = (ins[0].shape, ins[1].shape, *batch_dims);
            let k = i.last().and_then(|d| d.known());
            match k {
                Some(k) if i.len() > b && x.len() >= b + k => {
                    let mut s = i[..i.len() - 1].to_vec();
                    s.extend_from_slice(&x[b + k..]);
                    one(ins[0].dtype, s)
                }
                _ => Err(cx.shape_err(format!(
                    "indices {} do not address data {} with batch_dims {b}",
                    shape_str(i),
                    shape_str(x)
                ))),
            }
        }
        _ => infer_shape::infer_data_movement(&mut cx, ins),
    }
}

fn check_eq(cx: &Cx, a: &Dim, b: &Dim, what: &str) -> Result<()> {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) if x != y => {
            Err(cx.shape_err(format!("{what} differ: {x} vs {y}")))
        }
        _ => Ok(()),
    }
}

fn matmul(cx: &mut Cx, a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return Err(cx.shape_err("MatMul inputs must have rank >= 1"));
    }
    // NumPy: 1-D operands are promoted to matrices and the added dim is removed afterwards.
    let a2: Vec<Dim> = if a.len() == 1 { vec![Dim::Known(1), a[0].clone()] } else { a.to_vec() };
    let b2: Vec<Dim> = if b.len() == 1 { vec![b[0].clone(), Dim::Known(1)] } else { b.to_vec() };
    let (ra, rb) = (a2.len(), b2.len());
    check_eq(cx, &a2[ra - 1], &b2[rb - 2], "inner dimensions").map_err(|_| {
        cx.shape_err(format!(
            "cannot multiply {} by {}: inner dimensions differ",
            shape_str(a),
            shape_str(b)
        ))
    })?;
    let mut out = broadcast(cx, &a2[..ra - 2], &b2[..rb - 2])?;
    if a.len() > 1 {
        out.push(a2[ra - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[rb - 1].clone());
    }
    Ok(out)
}

/// Expands defaulted per-axis vectors (empty means "all `v`").
fn per_axis(v: &[usize], n: usize, default: usize) -> Vec<usize> {
    if v.is_empty() {
        vec![default; n]
    } else {
        v.to_vec()
    }
}

/// Output size of one spatial axis of a sliding window.
#[allow(clippy::too_many_arguments)]
fn window_out(
    cx: &Cx,
    input: usize,
    k: usize,
    stride: usize,
    dil: usize,
    pads: (usize, usize),
    auto_pad: AutoPad,
    ceil: bool,
) -> Result<usize> {
    if stride == 0 || dil == 0 || k == 0 {
        return Err(
            cx.invalid(format!("kernel {k}, stride {stride} and dilation {dil} must be positive"))
        );
    }
    // Attribute values come from files: saturate instead of overflowing.
    let eff = (k - 1).saturating_mul(dil).saturating_add(1);
    match auto_pad {
        AutoPad::SameUpper | AutoPad::SameLower => return Ok(input.div_ceil(stride)),
        AutoPad::Valid => {
            if input < eff {
                return Err(cx.shape_err(format!(
                    "input size {input} is smaller than the kernel extent {eff}"
                )));
            }
            return Ok((input - eff) / stride + 1);
        }
        AutoPad::NotSet => {}
    }
    let total = input.saturating_add(pads.0).saturating_add(pads.1);
    if total < eff {
        return Err(cx.shape_err(format!(
            "padded input size {total} is smaller than the kernel extent {eff}"
        )));
    }
    let span = total - eff;
    let mut out = if ceil { span.div_ceil(stride) + 1 } else { span / stride + 1 };
    // With ceil_mode the last window must start inside the input or left padding (PyTorch/ONNX).
    if ceil && (out - 1) * stride >= input + pads.0 {
        out -= 1;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn spatial(
    cx: &mut Cx,
    x: &[Dim],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    auto_pad: AutoPad,
    ceil: bool,
) -> Result<Vec<Dim>> {
    let n = kernel.len();
    if x.len() != n + 2 {
        return Err(cx.shape_err(format!(
            "input {} does not match a {n}-D kernel {kernel:?}",
            shape_str(x)
        )));
    }
    let strides = per_axis(strides, n, 1);
    let dil = per_axis(dilations, n, 1);
    let pads = per_axis(pads, 2 * n, 0);
    if strides.len() != n || dil.len() != n || pads.len() != 2 * n {
        return Err(cx.invalid(format!(
            "strides {strides:?}, dilations {dil:?} and pads {pads:?} do not match a {n}-D kernel"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(match x[i + 2] {
            Dim::Known(d) => Dim::Known(window_out(
                cx,
                d,
                kernel[i],
                strides[i],
                dil[i],
                (pads[i], pads[i + n]),
                auto_pad,
                ceil,
            )?),
            Dim::Sym(_) => cx.fresh(),
        });
    }
    Ok(out)
}

fn conv(cx: &mut Cx, c: &ConvAttrs, x: &[Dim], w: &[Dim]) -> Result<Vec<Dim>> {
    if w.len() < 3 || x.len() != w.len() {
        return Err(cx.shape_err(format!(
            "input {} and weight {} ranks do not fit a convolution",
            shape_str(x),
            shape_str(w)
        )));
    }
    let group = c.group.max(1);
    if let (Some(cin), Some(wc)) = (x[1].known(), w[1].known()) {
        if cin != wc * group {
            return Err(cx.shape_err(format!(
                "input has {cin} channels but weight {} with group {group} expects {}",
                shape_str(w),
                wc * group
            )));
        }
    }
    let kernel: Vec<usize> = if c.kernel_shape.is_empty() {
        w[2..]
            .iter()
            .map(|d| d.known().ok_or_else(|| cx.shape_err("kernel size must be known")))
            .collect::<Result<_>>()?
    } else {
        c.kernel_shape.clone()
    };
    let mut out = vec![x[0].clone(), w[0].clone()];
    out.extend(spatial(cx, x, &kernel, &c.strides, &c.pads, &c.dilations, c.auto_pad, false)?);
    Ok(out)
}

fn conv_transpose(
    cx: &mut Cx,
    c: &crate::op::ConvTransposeAttrs,
    x: &[Dim],
    w: &[Dim],
) -> Result<Vec<Dim>> {
    if w.len() < 3 || x.len() != w.len() {
        return Err(cx.shape_err(format!(
            "input {} and weight {} ranks do not fit a convolution",
            shape_str(x),
            shape_str(w)
        )));
    }
    let n = w.len() - 2;
    let a = &c.conv;
    let kernel: Vec<usize> = if a.kernel_shape.is_empty() {
        w[2..]
            .iter()
            .map(|d| d.known().ok_or_else(|| cx.shape_err("kernel size must be known")))
            .collect::<Result<_>>()?
    } else {
        a.kernel_shape.clone()
    };
    let strides = per_axis(&a.strides, n, 1);
    let dil = per_axis(&a.dilations, n, 1);
    let pads = per_axis(&a.pads, 2 * n, 0);
    let opad = per_axis(&c.output_padding, n, 0);
    if kernel.len() != n
        || strides.len() != n
        || dil.len() != n
        || pads.len() != 2 * n
        || opad.len() != n
    {
        return Err(cx.invalid("per-axis attributes do not match the kernel rank"));
    }
    let oc = match w[1].known() {
        Some(m) => Dim::Known(m.saturating_mul(a.group.max(1))),
        None => cx.fresh(),
    };
    let mut out = vec![x[0].clone(), oc];
    for i in 0..n {
        if !c.output_shape.is_empty() {
            let o = c
                .output_shape
                .get(i)
                .copied()
                .ok_or_else(|| cx.invalid("output_shape has too few entries"))?;
            out.push(Dim::Known(o));
            continue;
        }
        out.push(match x[i + 2].known() {
            Some(d) if matches!(a.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) => {
                Dim::Known(d.saturating_mul(strides[i]))
            }
            Some(d) => {
                let full = strides[i]
                    .saturating_mul(d.saturating_sub(1))
                    .saturating_add(opad[i])
                    .saturating_add(kernel[i].saturating_sub(1).saturating_mul(dil[i]))
                    .saturating_add(1);
                let p = pads[i].saturating_add(pads[i + n]);
                if full <= p {
                    return Err(cx.shape_err("padding removes the whole output"));
                }
                Dim::Known(full - p)
            }
            None => cx.fresh(),
        });
    }
    Ok(out)
}

fn pool(cx: &mut Cx, p: &PoolAttrs, x: &[Dim]) -> Result<Vec<Dim>> {
    if p.kernel.is_empty() {
        return Err(cx.invalid("kernel_shape is required"));
    }
    let mut out = x.get(..2).ok_or_else(|| cx.shape_err("input must be [N, C, ...]"))?.to_vec();
    out.extend(spatial(
        cx,
        x,
        &p.kernel,
        &p.strides,
        &p.pads,
        &p.dilations,
        p.auto_pad,
        p.ceil_mode,
    )?);
    Ok(out)
}
