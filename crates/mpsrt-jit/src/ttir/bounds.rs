//! Full-block masks. Triton kernels guard every load and store with `offsets < n`, but all
//! programs except the last see a mask that is all true. This pass follows i32 values of the
//! form `base + g(e)` (a uniform `base` plus an element-dependent part with known bounds
//! `lo..=hi`: `tl.arange`, its broadcasts, sums and multiples by non-negative constants) and
//! turns comparisons of two such values into a uniform condition that implies the whole mask
//! (`max(offsets) < min(n)`). Loads and stores under such a mask branch once on that condition
//! and run without per-element tests in full blocks (see `memory::emit_load`).
//!
//! The conditions are evaluated in i32 like the kernel's own arithmetic, so they hold exactly
//! when the kernel's offsets do not overflow (they are buffer indices, below 2^31).

use super::lower::{TtirLowerer, V};
use super::parse::{operands, Op};
use crate::value::Ty;
use mpsrt_core::DType;

/// An i32 block `base + g(e)` with `lo <= g(e) <= hi` for every element.
#[derive(Debug, Clone)]
pub(super) struct Aff {
    base: String,
    lo: i64,
    hi: i64,
}

/// Per-value facts, keyed by SSA name.
#[derive(Debug, Default)]
pub(super) struct Bounds {
    aff: std::collections::HashMap<String, Aff>,
    /// Bool blocks that are all true when the uniform WGSL condition holds.
    full: std::collections::HashMap<String, String>,
    /// i32 constants.
    ints: std::collections::HashMap<String, i64>,
}

/// Integers held in i32 registers (int64 is computed in 32 bits, see `elementwise`).
fn is_index(t: Ty) -> bool {
    matches!(t, Ty::D(DType::I32 | DType::I64))
}

/// Largest |offset| tracked: beyond it, i32 sums in the condition could overflow.
const LIMIT: i64 = 1 << 30;

impl Bounds {
    /// The uniform condition under which mask value `name` is all true.
    pub fn full(&self, name: &str) -> Option<&str> {
        self.full.get(name).map(String::as_str)
    }
}

impl TtirLowerer {
    /// `name`'s affine form: tracked, or any uniform i32 value (`g = 0`).
    fn aff(&self, name: &str) -> Option<Aff> {
        if let Some(a) = self.bounds.aff.get(name) {
            return Some(a.clone());
        }
        let v = self.get(name).ok()?;
        (v.is_uniform() && is_index(v.ty())).then(|| Aff {
            base: v.view().expr.clone(),
            lo: 0,
            hi: 0,
        })
    }

    /// Records what `op` (already lowered, its results in `self.vals`) tells about its results.
    pub(super) fn track_bounds(&mut self, op: &Op) {
        let Some(res) = op.results.first().cloned() else { return };
        if self.in_function {
            return;
        }
        let ins = operands(&op.body);
        let a0 = ins.first().and_then(|n| self.aff(n));
        let a1 = ins.get(1).and_then(|n| self.aff(n));
        let a = |k: usize| if k == 0 { a0.clone() } else { a1.clone() };
        let out = match op.name.as_str() {
            "arith.constant" => {
                let text = op.body.split(" : ").next().unwrap_or("").trim();
                let text = text.strip_prefix("dense<").map_or(text, |x| x.trim_end_matches('>'));
                if let Ok(v) = text.parse::<i64>() {
                    self.bounds.ints.insert(res.clone(), v);
                }
                if text == "true" {
                    self.bounds.full.insert(res, "true".into());
                }
                return;
            }
            "tt.make_range" => {
                let s = super::parse::int_attr(&op.body, "start").unwrap_or(0);
                let e = super::parse::int_attr(&op.body, "end").unwrap_or(s + 1);
                Some(Aff { base: "0i".into(), lo: s, hi: e - 1 })
            }
            "tt.splat" | "tt.expand_dims" | "tt.broadcast" | "tt.reshape" | "arith.extsi"
            | "arith.trunci" | "arith.index_cast" => {
                if let Some(f) = ins.first().and_then(|n| self.bounds.full.get(n)).cloned() {
                    self.bounds.full.insert(res.clone(), f);
                }
                if let Some(c) = ins.first().and_then(|n| self.bounds.ints.get(n)).copied() {
                    self.bounds.ints.insert(res.clone(), c);
                }
                a(0)
            }
            "arith.addi" => match (a(0), a(1)) {
                (Some(x), Some(y)) => Some(Aff {
                    base: format!("({} + {})", x.base, y.base),
                    lo: x.lo + y.lo,
                    hi: x.hi + y.hi,
                }),
                _ => None,
            },
            "arith.subi" => match (a(0), a(1)) {
                (Some(x), Some(y)) => Some(Aff {
                    base: format!("({} - {})", x.base, y.base),
                    lo: x.lo - y.hi,
                    hi: x.hi - y.lo,
                }),
                _ => None,
            },
            "arith.muli" => {
                let c = |k: usize| ins.get(k).and_then(|n| self.bounds.ints.get(n)).copied();
                match (a(0), a(1), c(0), c(1)) {
                    (Some(x), _, _, Some(k)) | (_, Some(x), Some(k), _) if k >= 0 => Some(Aff {
                        base: format!("({} * {})", x.base, crate::value::i32_lit(k)),
                        lo: x.lo * k,
                        hi: x.hi * k,
                    }),
                    _ => None,
                }
            }
            "arith.cmpi" => {
                let pred = op.body.split([' ', ',']).next().unwrap_or("");
                let cond = match (a(0), a(1)) {
                    (Some(x), Some(y)) => {
                        let max =
                            |v: &Aff| format!("({} + {})", v.base, crate::value::i32_lit(v.hi));
                        let min =
                            |v: &Aff| format!("({} + {})", v.base, crate::value::i32_lit(v.lo));
                        match pred {
                            "slt" => Some(format!("({} < {})", max(&x), min(&y))),
                            "sle" => Some(format!("({} <= {})", max(&x), min(&y))),
                            "sgt" => Some(format!("({} > {})", min(&x), max(&y))),
                            "sge" => Some(format!("({} >= {})", min(&x), max(&y))),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                let bounded =
                    [a(0), a(1)].iter().flatten().all(|v| v.lo.abs() < LIMIT && v.hi.abs() < LIMIT);
                if let (Some(c), true) = (cond, bounded) {
                    // Bound here, where every value it reads is defined (the loads it serves
                    // are dominated by this op).
                    let f = self.em.fresh("full");
                    self.em.line(format!("let {f}: bool = {c};"));
                    self.bounds.full.insert(res, f);
                }
                return;
            }
            "arith.andi" => {
                let f = |k: usize| ins.get(k).and_then(|n| self.bounds.full.get(n)).cloned();
                if let (Some(x), Some(y)) = (f(0), f(1)) {
                    let c = if x == "true" {
                        y
                    } else if y == "true" {
                        x
                    } else {
                        let f = self.em.fresh("full");
                        self.em.line(format!("let {f}: bool = {x} && {y};"));
                        f
                    };
                    self.bounds.full.insert(res, c);
                }
                return;
            }
            _ => None,
        };
        if let Some(v) = out {
            let is_i32 = self.get(&res).is_ok_and(|r: V| is_index(r.ty()));
            if v.lo.abs() < LIMIT && v.hi.abs() < LIMIT && is_i32 {
                self.bounds.aff.insert(res, v);
            }
        }
    }
}
