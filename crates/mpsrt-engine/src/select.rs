//! Selection ops built from masks and reductions: TopK, CumProd and OneHot.
//!
//! The tensor library has no sort or scan kernel, so these ops are composed from broadcast
//! elementwise kernels and axis reductions that run unchanged on the CPU and the GPU place. Only
//! shape-derived patterns (iotas, triangular masks) and host parameters (k, axis, depth) are
//! built on the host; the data never leave the device.
//!
//! - TopK ranks every element of the axis against every other one (`[.., n, n]` comparisons
//!   summed over the last axis), then picks the element of rank `r` for each output slot `r < k`.
//!   That is O(n²) work and memory per row, so axis length and total pair count are capped
//!   ([`TOPK_MAX_AXIS`], [`MAX_PAIRS`]).
//! - CumProd multiplies `where(mask[i][j], x_j, 1)` over `j`: O(n²) too, but exact (a product
//!   of the same factors as a scan), unlike a log/exp formulation that breaks on zeros and signs.
//! - OneHot compares an iota along the new axis with the (negative-wrapped) indices.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use crate::value::host_i64;
use mpsrt_core::{normalize_axis, DType, Error, Place, Result};
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};

/// Longest TopK axis: the ranking materializes `n × n` comparisons per row.
pub(crate) const TOPK_MAX_AXIS: usize = 4096;
/// Most elements of the `[rows, n, n]` pairwise block one TopK or CumProd call may materialize.
pub(crate) const MAX_PAIRS: usize = 1 << 27;

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn, host_from: usize| OpEntry { name, run, host_from };
    vec![e("TopK", top_k, usize::MAX), e("CumProd", cumprod, 1), e("OneHot", one_hot, usize::MAX)]
}

/// An int32 tensor `0..n` of rank `rank`, every dim 1 except `axis`.
fn iota(n: usize, axis: usize, rank: usize, place: Place) -> Result<Tensor> {
    let v: Vec<i32> = (0..n as i32).collect();
    let mut shape = vec![1; rank];
    shape[axis] = n;
    Tensor::from_slice(&v, &shape, place)
}

/// Whether element `j` (input 1) is ordered before element `i` (input 0) in TopK's output, with
/// inputs 2 and 3 the positions `i` and `j`. Ties go to the lower index; NaN counts as larger
/// than every number (NumPy's sort order, which the ONNX reference uses), so it leads a
/// largest-k and trails a smallest-k.
fn before_expr(vt: VType, largest: bool) -> Expr {
    // Bools have no ordering ops in the expression language: compare them as 0/1.
    let (xi, xj) = if vt == VType::Bool {
        (Expr::cast(VType::Int, Expr::input(0)), Expr::cast(VType::Int, Expr::input(1)))
    } else {
        (Expr::input(0), Expr::input(1))
    };
    let (first, second) = if largest { (xj.clone(), xi.clone()) } else { (xi.clone(), xj.clone()) };
    let mut wins = Expr::binary(B::Gt, first, second);
    let mut equal = Expr::binary(B::Eq, xj.clone(), xi.clone());
    if vt == VType::Float {
        let nan_i = Expr::unary(U::IsNan, xi);
        let nan_j = Expr::unary(U::IsNan, xj);
        let (nan_lead, nan_other) =
            if largest { (nan_j.clone(), nan_i.clone()) } else { (nan_i.clone(), nan_j.clone()) };
        let nan_wins = Expr::binary(B::And, nan_lead, Expr::unary(U::Not, nan_other));
        wins = Expr::binary(B::Or, wins, nan_wins);
        equal = Expr::binary(B::Or, equal, Expr::binary(B::And, nan_i, nan_j));
    }
    let j_lower = Expr::binary(B::Lt, Expr::input(3), Expr::input(2));
    Expr::binary(B::Or, wins, Expr::binary(B::And, equal, j_lower))
}

/// Outputs `(values, indices)` of the `k` largest (or smallest) elements along the axis, sorted.
fn top_k(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::TopK { axis, k, largest, .. } = &node.op else {
        return Err(ctx.err(node, "not TopK"));
    };
    if inputs.len() > 1 {
        return Err(ctx.err(node, "k is still an input; its value must be known before running"));
    }
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    if x.ndim() == 0 {
        return Err(ctx.err(node, "input must have rank >= 1, got a scalar"));
    }
    let ax = normalize_axis(&label, *axis as isize, x.ndim())?;
    let (n, k) = (x.shape()[ax], *k);
    if k > n {
        return Err(ctx.err(node, format!("k = {k} exceeds axis {ax} of shape {:?}", x.shape())));
    }
    let last = x.ndim() as isize - 1;
    let mut out_shape = x.shape().to_vec();
    out_shape[ax] = k;
    if k == 0 || x.numel() == 0 {
        let v = t::zeros(&out_shape, x.dtype(), x.place())?;
        let i = t::zeros(&out_shape, DType::I32, x.place())?;
        return Ok(vec![to_out(ctx, node, 0, v)?, to_out(ctx, node, 1, i)?]);
    }
    let rows = x.numel() / n;
    let pairs = rows.saturating_mul(n).saturating_mul(n);
    if n > TOPK_MAX_AXIS || pairs > MAX_PAIRS {
        return Err(Error::unsupported(
            label,
            format!(
                "axis length {n} over {rows} rows needs {pairs} pairwise comparisons; this TopK \
                 ranks by comparing all pairs and supports at most {TOPK_MAX_AXIS} per axis and \
                 {MAX_PAIRS} in total"
            ),
        ));
    }
    let place = x.place();
    let vt = VType::of(x.dtype());
    // Work with the axis last: xt [.., n].
    let xt = x.transpose(ax as isize, last).map_err(wrap)?;
    let (pos_i, pos_j) = (iota(n, 0, 2, place)?, iota(n, 1, 2, place)?);
    // rank[.., i] = #{j ordered before i}: a permutation of 0..n per row.
    let xi = xt.unsqueeze(-1).map_err(wrap)?;
    let xj = xt.unsqueeze(-2).map_err(wrap)?;
    let count = Expr::select(
        before_expr(vt, *largest),
        Expr::Scalar(0, VType::Int),
        Expr::Scalar(1, VType::Int),
    );
    let sc = [Scalar::I(1), Scalar::I(0)];
    let before = t::fused_elementwise(&label, &[&xi, &xj, &pos_i, &pos_j], DType::I32, count, &sc)?;
    let rank = t::sum(&before, Some(&[-1]), false).map_err(wrap)?;
    drop(before);
    // Slot r takes the element whose rank is r: a one-hot over [.., k, n] reduced over n.
    let rank = rank.unsqueeze(-2).map_err(wrap)?;
    let slot = iota(k, 0, 2, place)?;
    let hit = || Expr::binary(B::Eq, Expr::input(0), Expr::input(1));
    let pick = Expr::select(hit(), Expr::input(2), Expr::Scalar(0, VType::Int));
    let idx =
        t::fused_elementwise(&label, &[&rank, &slot, &pos_j], DType::I32, pick, &[Scalar::I(0)])?;
    let idx = t::sum(&idx, Some(&[-1]), false).map_err(wrap)?;
    let vals = if vt == VType::Float {
        // Every other term is +0, so the sum is exactly the picked element (NaN and inf kept).
        let zero = Expr::cast(VType::Float, Expr::Scalar(0, VType::Int));
        let pick = Expr::select(hit(), Expr::input(2), zero);
        let m =
            t::fused_elementwise(&label, &[&rank, &slot, &xj], x.dtype(), pick, &[Scalar::I(0)])?;
        t::sum(&m, Some(&[-1]), false).map_err(wrap)?
    } else {
        // Integer sums would widen (and bools cannot be summed back): take the max over the
        // row with the other terms set to the row minimum, which never exceeds the picked one.
        let low = t::min(&xt, Some(&[-1]), true).and_then(|m| m.unsqueeze(-1)).map_err(wrap)?;
        let pick = Expr::select(hit(), Expr::input(2), Expr::input(3));
        let m = t::fused_elementwise(&label, &[&rank, &slot, &xj, &low], x.dtype(), pick, &[])?;
        t::max(&m, Some(&[-1]), false).map_err(wrap)?
    };
    let back = |v: Tensor| v.transpose(ax as isize, last).and_then(|v| v.contiguous());
    let vals = back(vals).map_err(wrap)?;
    let idx = back(idx).map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, vals)?, to_out(ctx, node, 1, idx)?])
}

/// Cumulative product: `y_i = prod_j where(mask[i][j], x_j, 1)`, the mask selecting `j <= i`
/// (or `<`, `>=`, `>` for the exclusive and reverse forms).
fn cumprod(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::CumProd { exclusive, reverse } = &node.op else {
        return Err(ctx.err(node, "not CumProd"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let axis = match inputs.get(1).map(host_i64).transpose()?.as_deref() {
        Some([a]) => *a,
        Some(a) => return Err(ctx.err(node, format!("axis must be one integer, got {a:?}"))),
        None => return Err(ctx.err(node, "expects an axis input")),
    };
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    if x.ndim() == 0 {
        return Err(ctx.err(node, "input must have rank >= 1, got a scalar"));
    }
    let ax = normalize_axis(&label, axis as isize, x.ndim())?;
    let n = x.shape()[ax];
    if x.numel() == 0 {
        return Ok(vec![to_out(ctx, node, 0, x.clone())?]);
    }
    let rows = x.numel() / n;
    if rows.saturating_mul(n).saturating_mul(n) > MAX_PAIRS {
        return Err(Error::unsupported(
            label,
            format!(
                "axis length {n} over {rows} rows: this CumProd multiplies an n×n masked block \
                 per row and supports at most {MAX_PAIRS} elements in total"
            ),
        ));
    }
    // mask[i][j]: element j is a factor of output i.
    let mask: Vec<bool> = (0..n * n)
        .map(|p| {
            let (i, j) = (p / n, p % n);
            match (*reverse, *exclusive) {
                (false, false) => j <= i,
                (false, true) => j < i,
                (true, false) => j >= i,
                (true, true) => j > i,
            }
        })
        .collect();
    let mask = Tensor::from_bools(&mask, &[n, n], x.place())?;
    let last = x.ndim() as isize - 1;
    let xj = x.transpose(ax as isize, last).and_then(|v| v.unsqueeze(-2)).map_err(wrap)?;
    let vt = VType::of(x.dtype());
    let one = Expr::cast(vt, Expr::Scalar(0, VType::Int));
    let e = Expr::select(Expr::input(1), Expr::input(0), one);
    let m = t::fused_elementwise(&label, &[&xj, &mask], x.dtype(), e, &[Scalar::I(1)])?;
    let y = t::prod(&m, Some(&[-1]), false)
        .and_then(|y| y.transpose(ax as isize, last))
        .and_then(|y| y.contiguous())
        .map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

/// `values[1]` (on) where the index equals the position along the new axis, else `values[0]`.
/// Negative indices count from `depth`; indices outside `-depth..depth` match nothing.
fn one_hot(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::OneHot { axis, depth } = &node.op else {
        return Err(ctx.err(node, "not OneHot"));
    };
    if inputs.len() > 2 {
        return Err(
            ctx.err(node, "depth is still an input; its value must be known before running")
        );
    }
    let idx = ctx.input(node, inputs, 0)?;
    let values = ctx.input(node, inputs, 1)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    if values.numel() != 2 {
        return Err(ctx.err(
            node,
            format!("values must hold [off_value, on_value], got shape {:?}", values.shape()),
        ));
    }
    let rank = idx.ndim() + 1;
    let ax = normalize_axis(&label, *axis as isize, rank)?;
    let depth_i32 = i32::try_from(*depth)
        .map_err(|_| ctx.err(node, format!("depth {depth} exceeds the int32 range")))?;
    let idx_u = idx.unsqueeze(ax as isize).map_err(wrap)?;
    let pos = iota(*depth, ax, rank, idx.place())?;
    let flat = values.reshape(&[2]).map_err(wrap)?;
    let off = flat.slice(0, Some(0), Some(1), 1).map_err(wrap)?;
    let on = flat.slice(0, Some(1), Some(2), 1).map_err(wrap)?;
    // Non-integer indices are truncated, as the ONNX spec asks.
    let i = match VType::of(idx.dtype()) {
        VType::Int => Expr::input(0),
        _ => Expr::cast(VType::Int, Expr::input(0)),
    };
    let neg = Expr::binary(B::Lt, i.clone(), Expr::Scalar(1, VType::Int));
    let wrapped =
        Expr::select(neg, Expr::binary(B::Add, i.clone(), Expr::Scalar(0, VType::Int)), i);
    let e =
        Expr::select(Expr::binary(B::Eq, wrapped, Expr::input(1)), Expr::input(3), Expr::input(2));
    let sc = [Scalar::I(depth_i32 as i64), Scalar::I(0)];
    let y = t::fused_elementwise(&label, &[&idx_u, &pos, &off, &on], values.dtype(), e, &sc)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}
