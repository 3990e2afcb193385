//! Broadcasts by recomputation. A block is distributed over the workgroup (element `e` lives in
//! invocation `e % wg`), so `tt.broadcast` of a `[1, N]` or `[M, 1]` block normally exchanges
//! the elements through workgroup memory: a store, a barrier, a load, a barrier. Triton's
//! kernels broadcast mostly index arithmetic — `tl.arange` rows and columns, and the masks
//! compared from them (tutorial 03 broadcasts two K masks in every iteration of its K loop:
//! four barriers per step) — and such a block is a pure function of its element index and of
//! uniform values. Here each block built only from `tt.make_range`, uniform values and
//! elementwise ops keeps that function as a WGSL template (`{E}` stands for the element index),
//! and a broadcast of it evaluates the template at the source index of every output element:
//! no workgroup memory, no barrier.
//!
//! Templates name only `let`s of enclosing scopes (SSA dominance: a value is used where its
//! operands are visible) and are capped in length so repeated nesting cannot blow up the text.

use super::lower::{TtirLowerer, V};
use crate::value::{Tensor, Ty};

/// Longest template kept (characters).
const MAX_TEMPLATE: usize = 600;

impl TtirLowerer {
    /// The operands of an elementwise op as templates: uniform values as themselves, blocks by
    /// their template; `None` when some block has none.
    pub(super) fn remat_args(&self, ins: &[&V]) -> Option<Vec<String>> {
        ins.iter()
            .map(|v| {
                if v.is_uniform() {
                    Some(v.view().expr.clone())
                } else {
                    self.remat.get(&v.view().expr).cloned()
                }
            })
            .collect()
    }

    /// Remembers how to recompute block `out` from its element index.
    pub(super) fn remat_note(&mut self, out: &Tensor, template: String) {
        if out.is_block() && template.len() <= MAX_TEMPLATE {
            self.remat.insert(out.expr.clone(), template);
        }
    }

    /// `t` (a block with a template) broadcast to `shape` (same rank after padding rank 1 to
    /// `[1, n]`, each dim equal or 1) by evaluating the template per output element.
    pub(super) fn remat_broadcast(&mut self, t: &Tensor, shape: &[usize]) -> Option<Tensor> {
        let template = self.remat.get(&t.expr)?.clone();
        let pad = |s: &[usize]| if s.len() == 1 { vec![1, s[0]] } else { s.to_vec() };
        let (src, dst) = (pad(&t.shape), pad(shape));
        let ([sm, sn], [_, n]) = (src.as_slice(), dst.as_slice()) else { return None };
        let row = if *sm == 1 { "0u".to_string() } else { format!("({{E}} / {n}u)") };
        let col = if *sn == 1 { "0u".to_string() } else { format!("({{E}} % {n}u)") };
        let index = format!("({row} * {sn}u + {col})");
        let out_template = template.replace("{E}", &index);
        let expr = out_template.replace("{E}", "e");
        let ty: Ty = t.ty;
        let out = self.em.map(ty, shape, &[], |_| expr.clone());
        self.remat_note(&out, out_template);
        Some(out)
    }
}
