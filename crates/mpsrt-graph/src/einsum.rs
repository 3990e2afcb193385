//! Einsum equations: parsing into per-operand label lists (shared by shape inference and the
//! executor) and the output shape they imply.
//!
//! Labels are ASCII letters; `...` stands for the broadcast dims of an operand. Ellipsis dims get
//! labels counted from the right (NumPy aligns them like broadcasting), so operands with fewer
//! ellipsis dims simply lack the leftmost ones. Without `->` the output is the ellipsis dims
//! followed by the letters used exactly once, in alphabetical (ASCII) order, as in NumPy.

use crate::ir::Dim;
use mpsrt_core::{Error, Result};

/// Label id of the ellipsis dim `d` places from the right (letters use their ASCII code).
const ELLIPSIS_BASE: u32 = 1000;

/// A parsed equation: one label per dim of each operand, and the output labels in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumSpec {
    pub inputs: Vec<Vec<u32>>,
    pub output: Vec<u32>,
}

/// Splits a term into letters and whether (and where) it holds `...`.
fn term(op: &str, s: &str) -> Result<(Vec<u32>, Option<usize>)> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let (head, tail, ell) = match s.find("...") {
        Some(p) => (&s[..p], &s[p + 3..], true),
        None => (&s[..], "", false),
    };
    let letters = |part: &str| -> Result<Vec<u32>> {
        part.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(c as u32)
                } else {
                    Err(Error::invalid(
                        op,
                        format!("equation term {s:?} has {c:?}; expected letters and one '...'"),
                    ))
                }
            })
            .collect()
    };
    let mut v = letters(head)?;
    let at = ell.then_some(v.len());
    v.extend(letters(tail)?);
    Ok((v, at))
}

/// Expands a term's ellipsis into `n` dims labelled from the right.
fn expand(letters: &[u32], at: Option<usize>, n: usize) -> Vec<u32> {
    match at {
        None => letters.to_vec(),
        Some(p) => {
            let mut v = letters[..p].to_vec();
            v.extend((0..n).map(|k| ELLIPSIS_BASE + (n - 1 - k) as u32));
            v.extend_from_slice(&letters[p..]);
            v
        }
    }
}

/// Parses `equation` for operands of the given ranks.
pub fn parse(equation: &str, ranks: &[usize]) -> Result<EinsumSpec> {
    let op = "Einsum";
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(Error::invalid(
            op,
            format!(
                "equation {equation:?} names {} operands, got {} inputs",
                terms.len(),
                ranks.len()
            ),
        ));
    }
    let mut inputs = Vec::with_capacity(terms.len());
    let mut max_ell = 0;
    for (t, &rank) in terms.iter().zip(ranks) {
        let (letters, at) = term(op, t)?;
        let n_ell = match (at, rank.checked_sub(letters.len())) {
            (_, None) | (None, Some(1..)) => {
                return Err(Error::invalid(
                    op,
                    format!("equation term {t:?} does not match an input of rank {rank}"),
                ))
            }
            (_, Some(n)) => n,
        };
        max_ell = max_ell.max(n_ell);
        inputs.push(expand(&letters, at, n_ell));
    }
    let output = match rhs {
        Some(r) => {
            let (letters, at) = term(op, r)?;
            let out = expand(&letters, at, max_ell);
            for (i, l) in out.iter().enumerate() {
                if out[..i].contains(l) || !inputs.iter().any(|v| v.contains(l)) {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "output term {r:?} repeats a label or uses one no input has \
                             (equation {equation:?})"
                        ),
                    ));
                }
            }
            out
        }
        None => {
            let mut out: Vec<u32> =
                (0..max_ell).map(|k| ELLIPSIS_BASE + (max_ell - 1 - k) as u32).collect();
            let mut once: Vec<u32> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| l < ELLIPSIS_BASE)
                .filter(|l| inputs.iter().flatten().filter(|m| *m == l).count() == 1)
                .collect();
            once.sort_unstable();
            out.extend(once);
            out
        }
    };
    Ok(EinsumSpec { inputs, output })
}

/// Output shape: each output label takes the size its operands agree on (1 broadcasts).
pub fn output_shape(spec: &EinsumSpec, shapes: &[&[Dim]]) -> Result<Vec<Dim>> {
    spec.output
        .iter()
        .map(|&l| {
            let mut found: Option<Dim> = None;
            for (labels, shape) in spec.inputs.iter().zip(shapes) {
                for (m, d) in labels.iter().zip(shape.iter()) {
                    if *m != l || d == &Dim::Known(1) {
                        continue;
                    }
                    match (&found, d) {
                        (Some(Dim::Known(a)), Dim::Known(b)) if a != b => {
                            return Err(Error::shape(
                                "Einsum",
                                format!("a label has sizes {a} and {b} in different operands"),
                            ))
                        }
                        (None, _) | (Some(Dim::Sym(_)), Dim::Known(_)) => found = Some(d.clone()),
                        _ => {}
                    }
                }
            }
            Ok(found.unwrap_or(Dim::Known(1)))
        })
        .collect()
}
