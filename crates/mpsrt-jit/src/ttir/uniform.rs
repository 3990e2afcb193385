//! Whether a reduction result may steer control flow: a forward taint over the TTIR from every
//! `tt.reduce` result through every op that reads a tainted value (loop-carried values and
//! `scf.if` / `scf.for` results included, to a fixed point). If no `scf.if` condition and no
//! `scf.for` bound is tainted, reduction results may be WGSL values the uniformity analysis
//! calls non-uniform (they are equal in every invocation, but only `workgroupUniformLoad` can
//! prove it to the validator, at the price of a barrier): single-subgroup and one-barrier
//! reductions (`crate::subgroup`) and the narrowed layout (`CompileOptions::narrow_to`) are then
//! allowed.

use super::parse::{self, operands, Op};
use std::collections::HashSet;

/// Whether any reduction result (transitively) decides a branch or a loop bound of `ops`.
pub(super) fn reductions_steer(ops: &[Op]) -> bool {
    let mut t = HashSet::new();
    while taint(ops, &mut t) {}
    steers(ops, &t)
}

/// One pass of the forward taint; whether anything new was tainted.
fn taint(ops: &[Op], t: &mut HashSet<String>) -> bool {
    let mut changed = false;
    for op in ops {
        for r in &op.regions {
            changed |= taint(&r.ops, t);
        }
        let yields = op.regions.iter().any(|r| {
            r.ops
                .iter()
                .any(|o| o.name == "scf.yield" && operands(&o.body).iter().any(|x| t.contains(x)))
        });
        let hit = match op.name.as_str() {
            "tt.reduce" => true,
            "scf.for" => {
                // The loop's carried values: tainted when their initial or yielded values are
                // (the induction variable only through the bounds, which `steers` rejects).
                let (names, inits) = iter_args(&op.body);
                let hit = yields || inits.iter().any(|x| t.contains(x));
                if hit {
                    for n in names {
                        changed |= t.insert(n);
                    }
                }
                hit
            }
            _ => yields || operands(&op.body).iter().any(|x| t.contains(x)),
        };
        if hit {
            for r in &op.results {
                changed |= t.insert(r.clone());
            }
        }
    }
    changed
}

fn steers(ops: &[Op], t: &HashSet<String>) -> bool {
    ops.iter().any(|op| {
        let ins = operands(&op.body);
        let own = match op.name.as_str() {
            "scf.if" => ins.first().is_some_and(|c| t.contains(c)),
            "scf.for" => {
                let w: Vec<&str> = op.body.split_whitespace().collect();
                [2, 4, 6].iter().any(|&k| w.get(k).is_none_or(|x| t.contains(*x)))
            }
            // Control flow the lowering does not take apart here: assume the worst.
            "scf.while" | "scf.condition" | "cf.br" | "cf.cond_br" => true,
            _ => false,
        };
        own || op.regions.iter().any(|r| steers(&r.ops, t))
    })
}

/// The names and initial values of an `scf.for`'s `iter_args(%a = %x, ..)`.
fn iter_args(body: &str) -> (Vec<String>, Vec<String>) {
    let (mut names, mut inits) = (Vec::new(), Vec::new());
    if let Some(i) = body.find("iter_args(") {
        let open = i + "iter_args".len();
        if let Some(close) = parse::matching(body, open) {
            for pair in parse::split_top(&body[open + 1..close], ',') {
                if let Some((n, v)) = pair.split_once('=') {
                    names.push(n.trim().to_string());
                    inits.push(v.trim().to_string());
                }
            }
        }
    }
    (names, inits)
}
