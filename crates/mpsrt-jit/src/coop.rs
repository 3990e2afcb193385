//! `tl.dot` on cooperative matrices (tensor cores / simdgroup matrices through wgpu's
//! `wgpu_cooperative_matrix`), used when [`crate::CompileOptions::coop`] names a configuration
//! the adapter has. Same pattern as the f16 GEMM in `mpsrt-kernels/src/matmul_coop.rs`: the
//! operands are staged in typed workgroup arrays (`f16` A and B, `f32` C), each subgroup owns a
//! fixed set of `S x S` output tiles and runs `coopLoadT` / `coopMultiplyAdd` over K, then
//! `coopStoreT`s its tiles back, and every invocation reads its own elements of the result. The
//! tile loop has a constant trip count (tiles are dealt out evenly), so the cooperative ops stay
//! in subgroup-uniform control flow. Shapes that do not tile evenly keep the register path.

use crate::emit::Emitter;
use crate::value::{Tensor, Ty};
use mpsrt_core::DType;

/// A cooperative-matrix configuration: `S x S` f16 tiles with f32 accumulation, for kernels run
/// with subgroups of `subgroup` lanes (the adapter's fixed subgroup size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopConfig {
    pub size: u32,
    pub subgroup: u32,
}

impl Emitter {
    /// `a @ b + acc` on cooperative matrices, or `None` when the shapes, types or workgroup do
    /// not fit (the caller then takes the register-tiled path).
    pub(crate) fn dot_coop(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        acc: Option<&Tensor>,
        out_ty: Ty,
    ) -> Option<Tensor> {
        let cfg = self.coop.filter(|_| !self.emulate_coop)?;
        let (s, sg) = (cfg.size as usize, cfg.subgroup as usize);
        let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
        let f16 = |t: &Tensor| t.ty == Ty::D(DType::F16);
        if !(f16(a) && f16(b)) || out_ty != Ty::D(DType::F32) {
            return None;
        }
        let tiles_fit = m.is_multiple_of(s) && n.is_multiple_of(s) && k.is_multiple_of(s);
        if !tiles_fit || !self.wg.is_multiple_of(sg) {
            return None;
        }
        let (tiles, nsg) = ((m / s) * (n / s), self.wg / sg);
        if !tiles.is_multiple_of(nsg) {
            return None;
        }
        self.uses_coop = true;
        let id = self.fresh("");
        let (ca, cb, cc) = (format!("ca{id}"), format!("cb{id}"), format!("cc{id}"));
        self.functions.push(format!(
            "var<workgroup> {ca}: array<f16, {}>;\nvar<workgroup> {cb}: array<f16, {}>;\nvar<workgroup> {cc}: array<f32, {}>;\n",
            m * k,
            k * n,
            m * n
        ));
        self.extra_workgroup_bytes += (m * k + k * n) * 2 + m * n * 4;
        let (av, bv) = (a.at("i"), b.at("i"));
        self.for_each(a.numel(), |em| em.line(format!("{ca}[e] = f16({av});")));
        self.for_each(b.numel(), |em| em.line(format!("{cb}[e] = f16({bv});")));
        let base = acc.map_or("0.0f".to_string(), |t| t.at("i"));
        self.for_each(m * n, |em| em.line(format!("{cc}[e] = {base};")));
        self.barrier();
        let (j, kk, c) = (self.fresh("j"), self.fresh("k"), self.fresh("c"));
        let tn = n / s;
        self.open(format!("for (var {j} = 0u; {j} < {}u; {j}++)", tiles / nsg));
        self.line(format!("let t = sg + {j} * {nsg}u;"));
        self.line(format!("let at = (t / {tn}u) * {}u;", s * k));
        self.line(format!("let ct = (t / {tn}u) * {}u + (t % {tn}u) * {s}u;", s * n));
        self.line(format!("var {c} = coopLoadT<coop_mat{s}x{s}<f32, C>>(&{cc}[ct], {n}u);"));
        self.open(format!("for (var {kk} = 0u; {kk} < {k}u; {kk} += {s}u)"));
        self.line(format!("let ma = coopLoadT<coop_mat{s}x{s}<f16, A>>(&{ca}[at + {kk}], {k}u);"));
        self.line(format!(
            "let mb = coopLoadT<coop_mat{s}x{s}<f16, B>>(&{cb}[{kk} * {n}u + (t % {tn}u) * {s}u], {n}u);"
        ));
        self.line(format!("{c} = coopMultiplyAdd(ma, mb, {c});"));
        self.close();
        self.line(format!("coopStoreT({c}, &{cc}[ct], {n}u);"));
        self.close();
        self.barrier();
        let out = self.decl_block(out_ty, &[m, n]);
        let lhs = out.at("i");
        self.for_each(m * n, |em| em.line(format!("{lhs} = {cc}[e];")));
        self.barrier();
        Some(out)
    }
}
