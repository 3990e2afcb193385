//! Software pipelining of the loads in an `scf.for` (what Triton's `num_stages` does on CUDA):
//! a `tt.load` whose pointers and mask depend only on the induction variable and on values
//! from outside the loop is issued one iteration early. Before the loop the first iteration's
//! load goes into a `var`; at the top of each iteration that `var` becomes the iteration's
//! value and the next iteration's load is issued into it, so its global-memory latency overlaps
//! the rest of the body (tutorial 02's softmax: the next row arrives during this row's two
//! reductions).
//!
//! Only in self-bounded modules (`CompileOptions::prefetch_stage`, off with
//! `MPSRT_TRITON_PREFETCH=0`): the load for the iteration after the last (and the first one of a
//! loop that does not run) is speculative, and is memory-safe only because every storage index
//! is clamped. Loops with a `tl.dot` keep their staged copies (`dot_stage`); loops with atomics,
//! and loads from a buffer the loop also stores to (or stores through pointers this pass cannot
//! trace to a kernel argument), are left alone, so a store is never moved after the load that
//! should have seen it.

use super::lower::{TtirLowerer, V};
use super::parse::{operands, Op};
use crate::value::{Tensor, Ty};
use mpsrt_core::{DType, Result};
use std::collections::{BTreeSet, HashMap};

/// One pipelined load: the body ops its operands need (in body order) and its own index.
pub(super) struct Piped {
    slice: Vec<usize>,
    load: usize,
    /// The `var` holding the next iteration's value (set by the prologue).
    pre: String,
}

/// Ops the slice of a pipelined load may contain: pure, no regions.
fn pure(op: &Op) -> bool {
    op.regions.is_empty()
        && (op.name.starts_with("arith.")
            || op.name.starts_with("math.")
            || matches!(
                op.name.as_str(),
                "tt.splat" | "tt.addptr" | "tt.make_range" | "tt.broadcast" | "tt.expand_dims"
            ))
}

/// Every op of `ops`, nested regions included.
fn walk<'a>(ops: &'a [Op], out: &mut Vec<&'a Op>) {
    for o in ops {
        out.push(o);
        for r in &o.regions {
            walk(&r.ops, out);
        }
    }
}

impl TtirLowerer {
    /// The kernel argument a pointer value `name` points into, traced through the body's
    /// pointer arithmetic (`def`: the body's results by name); `None` when it cannot be told.
    fn root_arg(&self, name: &str, body: &[Op], def: &HashMap<&str, usize>) -> Option<usize> {
        let mut n = name.to_string();
        for _ in 0..64 {
            match def.get(n.as_str()) {
                Some(&j) => {
                    let o = &body[j];
                    if !matches!(
                        o.name.as_str(),
                        "tt.addptr" | "tt.splat" | "tt.broadcast" | "tt.expand_dims"
                    ) {
                        return None;
                    }
                    n = operands(&o.body).into_iter().next()?;
                }
                None => {
                    return match self.get(&n).ok()?.ty() {
                        Ty::Ptr { arg, .. } => Some(arg),
                        _ => None,
                    }
                }
            }
        }
        None
    }

    /// The loads of `scf.for` `op` (induction variable `iv`, carried values `carried`) to
    /// pipeline, with the body ops each needs.
    pub(super) fn pipeline_plan(&self, op: &Op, iv: &str, carried: &[String]) -> Vec<Piped> {
        let Some(body) = op.regions.first().map(|r| &r.ops) else { return Vec::new() };
        if !self.prefetch || self.in_function {
            return Vec::new();
        }
        let mut all = Vec::new();
        walk(body, &mut all);
        if all.iter().any(|o| o.name == "tt.dot" || o.name.starts_with("tt.atomic")) {
            return Vec::new();
        }
        let def: HashMap<&str, usize> = body
            .iter()
            .enumerate()
            .flat_map(|(i, o)| o.results.iter().map(move |r| (r.as_str(), i)))
            .collect();
        // Buffers the loop stores to; `None`: a store this pass cannot trace.
        let stored: Vec<Option<usize>> = all
            .iter()
            .filter(|o| o.name == "tt.store")
            .map(|o| operands(&o.body).first().and_then(|p| self.root_arg(p, body, &def)))
            .collect();
        if stored.contains(&None) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, o) in body.iter().enumerate() {
            if o.name != "tt.load" || o.results.len() != 1 {
                continue;
            }
            let ops = operands(&o.body);
            let Some(arg) = ops.first().and_then(|p| self.root_arg(p, body, &def)) else {
                continue;
            };
            if stored.contains(&Some(arg)) {
                continue;
            }
            let (mut slice, mut uses_iv, mut ok) = (BTreeSet::new(), false, true);
            let mut stack = ops;
            while let Some(n) = stack.pop() {
                if n == iv {
                    uses_iv = true;
                } else if carried.contains(&n) {
                    ok = false;
                } else if let Some(&j) = def.get(n.as_str()) {
                    if !pure(&body[j]) || j > i {
                        ok = false;
                    } else if slice.insert(j) {
                        stack.extend(operands(&body[j].body));
                    }
                } else if self.get(&n).is_err() {
                    ok = false;
                }
                if !ok {
                    break;
                }
            }
            if ok && uses_iv {
                out.push(Piped { slice: slice.into_iter().collect(), load: i, pre: String::new() });
            }
        }
        out
    }

    /// Lowers `p`'s slice and load with the induction variable `iv` bound to `at`; returns the
    /// load's value. The bindings are undone, so the body is later lowered as usual.
    fn lower_ahead(&mut self, body: &[Op], p: &Piped, iv: &str, at: V) -> Result<Tensor> {
        let ops: Vec<Op> = p.slice.iter().chain([&p.load]).map(|&j| body[j].clone()).collect();
        let names: Vec<String> = ops.iter().flat_map(|o| o.results.clone()).collect();
        let saved: Vec<Option<V>> = names.iter().map(|n| self.get(n).ok()).collect();
        let old_iv = self.set_val(iv, at);
        let lowered = self.lower_region(&ops);
        let value = lowered.and_then(|_| self.get(&body[p.load].results[0]));
        self.restore_val(iv, old_iv);
        for (n, old) in names.iter().zip(saved) {
            self.restore_val(n, old);
        }
        match value? {
            V::T(t) => Ok(t),
            V::Splat(t, shape) => Ok(self.em.splat(&t, &shape)),
        }
    }

    /// Before the loop opens: the first iteration's loads (`lb`: the lower bound) into `var`s.
    pub(super) fn pipeline_prologue(
        &mut self,
        op: &Op,
        iv: &str,
        lb: &V,
        plan: &mut [Piped],
    ) -> Result<()> {
        let Some(body) = op.regions.first().map(|r| &r.ops) else { return Ok(()) };
        for p in plan.iter_mut() {
            let t = self.lower_ahead(body, p, iv, lb.clone())?;
            p.pre = self.em.fresh("pre");
            self.em.line(format!("var {} = {};", p.pre, t.expr));
        }
        Ok(())
    }

    /// At the top of the body (`lv`: the loop variable, `st`: the step): each load's value is
    /// its `var`, and the next iteration's load is issued into the `var`. The body's own
    /// `tt.load` then takes the value (`pipelined`).
    pub(super) fn pipeline_top(
        &mut self,
        op: &Op,
        iv: &str,
        lv: &str,
        st: &str,
        plan: &[Piped],
    ) -> Result<()> {
        let Some(body) = op.regions.first().map(|r| &r.ops) else { return Ok(()) };
        for p in plan {
            let cur = self.em.fresh("cur");
            self.em.line(format!("let {cur} = {};", p.pre));
            let next = V::T(Tensor::scalar(format!("({lv} + {st})"), Ty::D(DType::I32)));
            let t = self.lower_ahead(body, p, iv, next)?;
            self.em.line(format!("{} = {};", p.pre, t.expr));
            let v = V::T(Tensor { expr: cur, ..t });
            self.pipelined.insert(body[p.load].results[0].clone(), v);
        }
        Ok(())
    }
}
