//! Einsum as a sequence of device tensor ops: per operand, repeated labels become a diagonal
//! (identity mask + sum) and labels used nowhere else are summed out; then operands are
//! contracted left to right, each pair as one batched matmul `[batch, M, K] @ [batch, K, N]`
//! (batch = labels both share and still need, K = shared labels no one needs any more); finally
//! the result is permuted into the output order.
//!
//! Matmul computes integers in f32, so integer einsums are exact only below 2^24.

use crate::ops::{Ctx, OpEntry};
use crate::reduce::to_out;
use mpsrt_core::{Error, Result};
use mpsrt_graph::einsum::parse;
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, Expr, Scalar, Tensor, VType};
use std::collections::HashMap;

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    vec![OpEntry { name: "Einsum", run: einsum, host_from: usize::MAX }]
}

/// An operand with one label per dim.
struct Term {
    x: Tensor,
    labels: Vec<u32>,
}

/// `[d0, d1, ..]` as the `isize` list `reshape` takes.
fn dims(v: &[usize]) -> Vec<isize> {
    v.iter().map(|&d| d as isize).collect()
}

/// Sums `x` over the dims at `axes`, keeping its dtype (integer sums widen).
fn sum_axes(x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    let a: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    t::sum(x, Some(&a), false)?.astype(x.dtype())
}

/// Replaces a label repeated within one operand by its diagonal: `x * eye` over the two dims,
/// summed over the second one.
fn diagonal(term: Term) -> Result<Term> {
    let Term { mut x, mut labels } = term;
    while let Some((p, q)) = (0..labels.len())
        .find_map(|q| labels[..q].iter().position(|&l| l == labels[q]).map(|p| (p, q)))
    {
        let (n, m) = (x.shape()[p], x.shape()[q]);
        if n != m {
            return Err(Error::shape(
                "Einsum",
                format!("a repeated label has sizes {n} and {m} in shape {:?}", x.shape()),
            ));
        }
        let eye: Vec<bool> = (0..n * n).map(|i| i / n == i % n).collect();
        let mut shape = vec![1; x.ndim()];
        shape[p] = n;
        shape[q] = n;
        let eye = Tensor::from_bools(&eye, &shape, x.place())?;
        let zero = Expr::cast(VType::of(x.dtype()), Expr::Scalar(0, VType::Int));
        let e = Expr::select(Expr::input(1), Expr::input(0), zero);
        let masked = t::fused_elementwise("Einsum", &[&x, &eye], x.dtype(), e, &[Scalar::I(0)])?;
        x = sum_axes(&masked, &[q])?;
        labels.remove(q);
    }
    Ok(Term { x, labels })
}

/// Sums out the labels of `term` that are not in `keep`.
fn sum_unneeded(term: Term, keep: &[u32]) -> Result<Term> {
    let axes: Vec<usize> =
        (0..term.labels.len()).filter(|&i| !keep.contains(&term.labels[i])).collect();
    let x = sum_axes(&term.x, &axes)?;
    let labels = term.labels.into_iter().filter(|l| keep.contains(l)).collect();
    Ok(Term { x, labels })
}

/// `x` permuted to `order` (labels it has) and broadcast to the label sizes, then reshaped to
/// `groups` flat dims (each the product of a run of `order`).
fn arrange(
    term: &Term,
    order: &[u32],
    sizes: &HashMap<u32, usize>,
    groups: &[usize],
) -> Result<Tensor> {
    let perm: Vec<isize> = order
        .iter()
        .map(|l| term.labels.iter().position(|m| m == l).map(|p| p as isize))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::invalid("Einsum", "internal: label missing from an operand"))?;
    let full: Vec<usize> = order.iter().map(|l| sizes[l]).collect();
    let x = term.x.permute(&perm)?.expand(&full)?.contiguous()?;
    let mut flat = Vec::with_capacity(groups.len());
    let mut at = 0;
    for &g in groups {
        flat.push(full[at..at + g].iter().product::<usize>() as isize);
        at += g;
    }
    x.reshape(&flat)
}

/// Contracts two operands, keeping the labels in `needed` (output and later operands).
fn contract(a: Term, b: Term, needed: &[u32], sizes: &HashMap<u32, usize>) -> Result<Term> {
    let in_both = |l: &u32| a.labels.contains(l) && b.labels.contains(l);
    let batch: Vec<u32> =
        a.labels.iter().copied().filter(|l| in_both(l) && needed.contains(l)).collect();
    let inner: Vec<u32> =
        a.labels.iter().copied().filter(|l| in_both(l) && !needed.contains(l)).collect();
    let a_only: Vec<u32> = a.labels.iter().copied().filter(|l| !b.labels.contains(l)).collect();
    let b_only: Vec<u32> = b.labels.iter().copied().filter(|l| !a.labels.contains(l)).collect();
    let cat = |parts: &[&[u32]]| parts.concat();
    let am = arrange(
        &a,
        &cat(&[&batch, &a_only, &inner]),
        sizes,
        &[batch.len(), a_only.len(), inner.len()],
    )?;
    let bm = arrange(
        &b,
        &cat(&[&batch, &inner, &b_only]),
        sizes,
        &[batch.len(), inner.len(), b_only.len()],
    )?;
    let labels = cat(&[&batch, &a_only, &b_only]);
    let shape: Vec<usize> = labels.iter().map(|l| sizes[l]).collect();
    let y = t::matmul(&am, &bm)?.reshape(&dims(&shape))?;
    Ok(Term { x: y, labels })
}

fn einsum(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Einsum { equation } = &node.op else {
        return Err(ctx.err(node, "not Einsum"));
    };
    let wrap = |e| ctx.wrap(node, e);
    let ranks: Vec<usize> = inputs.iter().map(Tensor::ndim).collect();
    let spec = parse(equation, &ranks).map_err(wrap)?;
    // Each label's size: operands must agree, except that size 1 broadcasts.
    let mut sizes: HashMap<u32, usize> = HashMap::new();
    for (labels, x) in spec.inputs.iter().zip(inputs) {
        for (&l, &d) in labels.iter().zip(x.shape()) {
            let s = sizes.entry(l).or_insert(d);
            if *s != d && *s != 1 && d != 1 {
                return Err(ctx.err(
                    node,
                    format!("equation {equation:?}: a label has sizes {s} and {d} across operands"),
                ));
            }
            *s = (*s).max(d);
        }
    }
    let mut terms = Vec::with_capacity(inputs.len());
    for (i, (labels, x)) in spec.inputs.iter().zip(inputs).enumerate() {
        let term = diagonal(Term { x: x.clone(), labels: labels.clone() }).map_err(wrap)?;
        // Labels no other operand and not the output use are summed out right away.
        let mut keep = spec.output.clone();
        keep.extend(
            spec.inputs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .flat_map(|(_, v)| v.iter().copied()),
        );
        terms.push(sum_unneeded(term, &keep).map_err(wrap)?);
    }
    let mut terms = terms.into_iter();
    let mut acc = terms.next().ok_or_else(|| ctx.err(node, "expects at least one input"))?;
    let rest: Vec<Term> = terms.collect();
    for (k, b) in rest.iter().enumerate() {
        let mut needed = spec.output.clone();
        needed.extend(rest[k + 1..].iter().flat_map(|t| t.labels.iter().copied()));
        let b = Term { x: b.x.clone(), labels: b.labels.clone() };
        acc = contract(acc, b, &needed, &sizes).map_err(wrap)?;
    }
    let acc = sum_unneeded(acc, &spec.output).map_err(wrap)?;
    let groups = vec![1; spec.output.len()];
    let y = arrange(&acc, &spec.output, &sizes, &groups).map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}
