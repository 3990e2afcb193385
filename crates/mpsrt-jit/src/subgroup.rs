//! Whole-block reductions through subgroup operations (`Emitter::reduce` with
//! `CompileOptions::subgroups`), in three shapes, cheapest first:
//!
//! * **One subgroup** (the workgroup is no larger than the adapter's fixed subgroup size, e.g.
//!   a TTIR kernel narrowed by `CompileOptions::narrow_to`): `subgroupAdd/Max/Min` of every
//!   invocation's partial *is* the result. No barrier, no workgroup memory.
//! * **One barrier** (`CompileOptions::one_barrier`): each subgroup writes its partial to one
//!   half of `wgr`, one barrier, then every subgroup folds all partials and reduces them again.
//!   The halves alternate at run time (`rp`), which is what makes the single barrier enough —
//!   see [`Emitter::fold_one_barrier`] for the argument.
//! * **Uniform** (the default otherwise): as above with one half, then invocation 0 publishes
//!   the result and `workgroupUniformLoad` hands it to everyone (a second barrier).
//!
//! The first two leave the result a value WGSL's uniformity analysis calls non-uniform (it is
//! the same in every invocation, but the validator cannot know): they are used only where no
//! reduction result steers control flow that holds barriers (`Emitter::nonuniform_ok`, decided
//! for TTIR kernels by `ttir::uniform`). Subgroup ids are used, never `lid / size`, so nothing
//! assumes how invocations map onto subgroups.

use crate::emit::{bits, combine, identity, unbits, Emitter, RedOp};
use crate::value::{Tensor, Ty};
use mpsrt_core::DType;

impl Emitter {
    /// Whether every invocation of the workgroup is in one subgroup (the adapter's subgroup
    /// size is fixed and at least the workgroup size).
    pub fn single_subgroup(&self) -> bool {
        self.subgroup_size > 0 && self.wg <= self.subgroup_size
    }

    /// The workgroup-wide `op` of every invocation's `acc` (see the module docs).
    pub(crate) fn subgroup_fold(&mut self, acc: &str, ty: Ty, op: RedOp) -> Tensor {
        self.uses_subgroups = true;
        let sop = match op {
            RedOp::Sum => "subgroupAdd",
            RedOp::Max => "subgroupMax",
            RedOp::Min => "subgroupMin",
        };
        let p = self.fresh("p");
        self.line(format!("let {p}: {} = {sop}({acc});", ty.wgsl()));
        if self.nonuniform_ok && self.single_subgroup() {
            return Tensor::scalar(p, ty);
        }
        if self.nonuniform_ok && self.one_barrier {
            return self.fold_one_barrier(&p, ty, op, sop);
        }
        self.fold_uniform(&p, ty, op, sop)
    }

    /// Partials of subgroups `0..nsg` to every invocation: each lane folds the partials
    /// `sgl, sgl + sgs, ..` read at `wgr[base + j]` and the subgroup reduces them again.
    fn fold_partials(&mut self, base: &str, ty: Ty, op: RedOp, sop: &str) -> String {
        let d = ty.dtype().unwrap_or(DType::I32);
        let (q, j) = (self.fresh("q"), self.fresh("j"));
        self.line(format!("var {q}: {} = {};", ty.wgsl(), identity(op, d)));
        self.open(format!("for (var {j} = sgl; {j} < nsg; {j} += sgs)"));
        let c = combine(op, &q, &unbits(&format!("wgr[{base}{j}]"), ty));
        self.line(format!("{q} = {c};"));
        self.close();
        let r = self.fresh("p");
        self.line(format!("let {r}: {} = {sop}({q});", ty.wgsl()));
        r
    }

    /// One barrier per reduction. Partial slots are `wgr[rp + sg]`, where `rp` (a `var` of the
    /// entry point, 0 at the start) flips between 0 and `wg` after every reduction.
    ///
    /// Why there is no write-after-read race: every invocation executes the same sequence of
    /// reductions R1, R2, .. (each holds a barrier, so it sits in uniform control flow), hence
    /// the same sequence of `rp` values, and Rk uses half `k mod 2`. Rk's reads of its half
    /// happen after its barrier Bk and, in each invocation's program order, before that
    /// invocation arrives at B(k+1). The next writer of the same half is R(k+2), whose writes
    /// come after B(k+1) in every invocation, and no invocation leaves B(k+1) before all have
    /// arrived, i.e. before all reads of Rk are done. R(k+1) writes the other half. Every
    /// invocation folds the same partials in the same order (one subgroup reduction per
    /// subgroup), so all hold the same result.
    fn fold_one_barrier(&mut self, p: &str, ty: Ty, op: RedOp, sop: &str) -> Tensor {
        let wg = self.wg;
        self.uses_parity = true;
        self.wgr_words = self.wgr_words.max(2 * wg);
        self.open("if (sgl == 0u)");
        self.line(format!("wgr[rp + sg] = {};", bits(p, ty)));
        self.close();
        self.barrier();
        let r = self.fold_partials("rp + ", ty, op, sop);
        self.line(format!("rp = {wg}u - rp;"));
        Tensor::scalar(r, ty)
    }

    /// Two barriers: partials at `wgr[sg]`, one barrier, the fold, then invocation 0 publishes
    /// the result at `wgr[wg]` and `workgroupUniformLoad` makes it a uniform value (it may then
    /// steer control flow that contains barriers, e.g. a loop bound computed from a
    /// reduction). `wgr` belongs to these reductions alone, and every invocation passes the
    /// uniform load's barrier only after reading the partials, so the next reduction may
    /// overwrite them without a trailing barrier.
    fn fold_uniform(&mut self, p: &str, ty: Ty, op: RedOp, sop: &str) -> Tensor {
        let slot = self.wg;
        self.wgr_words = self.wgr_words.max(slot + 1);
        self.open("if (sgl == 0u)");
        self.line(format!("wgr[sg] = {};", bits(p, ty)));
        self.close();
        self.barrier();
        let r = self.fold_partials("", ty, op, sop);
        self.open("if (lid == 0u)");
        self.line(format!("wgr[{slot}u] = {};", bits(&r, ty)));
        self.close();
        let (name, w) = (self.fresh("t"), self.fresh("w"));
        self.line(format!("let {w} = workgroupUniformLoad(&wgr[{slot}u]);"));
        self.line(format!("let {name}: {} = {};", ty.wgsl(), unbits(&w, ty)));
        Tensor::scalar(name, ty)
    }
}
