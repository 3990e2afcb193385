//! `tt.reduce` with any combiner and up to two operands (`tl.argmax`/`tl.argmin`,
//! `tl.max(..., return_indices=True)`, `tl.reduce` with a user function). The combiner region
//! becomes a WGSL function `combN(a0, a1, b0, b1) -> CombN` lowered by the same op lowering as
//! the kernel body; the reduction needs no identity element: each invocation folds the
//! elements it owns starting from its first one, then a tree over the invocations that own
//! any (whole-block reductions), or each output element folds its row/column sequentially from
//! workgroup memory (2-D axis reductions). Sum/max/min of one operand keep the identity-based
//! path of `Emitter::reduce`. `tt.scan` (prefix sums and the like) lives here too.

use super::lower::{TtirLowerer, V};
use super::parse::{self, operands, Op};
use crate::emit::{bits, unbits, RedOp};
use crate::value::{Tensor, Ty};
use mpsrt_core::{DType, Result};

impl TtirLowerer {
    /// Lowers the combiner region of `op` to a WGSL function of `2 * tys.len()` scalars
    /// returning a struct of `tys.len()` fields `v0, v1, ..`; returns the function's name.
    fn combiner_fn(&mut self, op: &Op, tys: &[Ty]) -> Result<String> {
        let r = op.regions.first().ok_or_else(|| self.err("tt.reduce without a combiner"))?;
        let k = tys.len();
        if r.args.len() != 2 * k {
            return Err(
                self.err(format!("the combiner takes {} arguments for {k} operands", r.args.len()))
            );
        }
        let name = self.em.fresh("comb");
        let sname = format!("C{}", &name[4..]);
        let mut params = Vec::new();
        let mut saved = Vec::new();
        for (j, (arg, _)) in r.args.iter().enumerate() {
            let ty = tys[j % k];
            params.push(format!("c{j}: {}", ty.wgsl()));
            let v = V::T(Tensor::scalar(format!("c{j}"), ty));
            saved.push((arg.clone(), self.set_val(arg, v)));
        }
        let outer = self.em.begin_function();
        self.in_function = true;
        let ys = self.lower_region(&r.ops);
        self.in_function = false;
        let body = self.em.end_function(outer);
        for (arg, old) in saved {
            self.restore_val(&arg, old);
        }
        self.set_op(op);
        let ys = ys?;
        if ys.len() != k || ys.iter().any(|y| y.view().is_block()) {
            return Err(self.err("the combiner must return one scalar per operand"));
        }
        let mut f = format!("struct {sname} {{\n");
        for (j, t) in tys.iter().enumerate() {
            f.push_str(&format!("    v{j}: {},\n", t.wgsl()));
        }
        f.push_str(&format!("}}\n\nfn {name}({}) -> {sname} {{\n", params.join(", ")));
        for l in body {
            f.push_str(&l);
            f.push('\n');
        }
        let vals: Vec<String> = ys
            .iter()
            .zip(tys)
            .map(|(y, t)| {
                let e = y.view().expr.clone();
                if y.ty() == *t {
                    e
                } else {
                    format!("{}({e})", t.wgsl())
                }
            })
            .collect();
        f.push_str(&format!("    return {sname}({});\n}}\n", vals.join(", ")));
        self.em.functions.push(f);
        Ok(name)
    }

    /// `tt.reduce` through a combiner function (see the module docs).
    pub(super) fn reduce_generic(
        &mut self,
        op: &Op,
        ops: &[String],
        axis: usize,
    ) -> Result<Vec<V>> {
        if ops.len() > 2 {
            return Err(self.err(format!(
                "reductions of {} tensors at once are not supported (up to 2, e.g. argmax)",
                ops.len()
            )));
        }
        let mut xs = Vec::new();
        for o in ops {
            let v = self.get(o)?;
            xs.push(self.tensor(&v));
        }
        let shape = xs[0].shape.clone();
        self.check_rank(&shape)?;
        if xs.iter().any(|x| x.shape != shape) || axis >= shape.len().max(1) {
            return Err(self.err(format!("operands of shapes {shape:?} reduced over axis {axis}")));
        }
        let tys: Vec<Ty> = xs.iter().map(|x| x.ty).collect();
        let comb = self.combiner_fn(op, &tys)?;
        let n = xs.len();
        let call = |a: &[String], b: &[String]| {
            let args: Vec<String> = a.iter().chain(b).cloned().collect();
            format!("{comb}({})", args.join(", "))
        };
        if shape.len() <= 1 {
            return Ok(self.reduce_whole(&xs, &tys, &call));
        }
        let (m, cols) = (shape[0], shape[1]);
        let (out_shape, len) = if axis == 0 { (vec![cols], m) } else { (vec![m], cols) };
        for (j, x) in xs.iter().enumerate() {
            self.em.use_scratch(j, x.numel());
            let b = bits(&x.at("i"), x.ty);
            self.em.for_each(x.numel(), |em| em.line(format!("wg{j}[e] = {b};")));
        }
        self.em.barrier();
        let outs: Vec<Tensor> = tys.iter().map(|t| self.em.decl_block(*t, &out_shape)).collect();
        let k = self.em.fresh("k");
        let idx = |kk: &str| {
            if axis == 0 {
                format!("{kk} * {cols}u + e")
            } else {
                format!("e * {cols}u + {kk}")
            }
        };
        let accs: Vec<String> = (0..n).map(|_| self.em.fresh("r")).collect();
        let first: Vec<String> =
            (0..n).map(|j| unbits(&format!("wg{j}[{}]", idx("0u")), tys[j])).collect();
        let next: Vec<String> =
            (0..n).map(|j| unbits(&format!("wg{j}[{}]", idx(&k)), tys[j])).collect();
        let c = self.em.fresh("c");
        let step = call(&accs, &next);
        let lhs: Vec<String> = outs.iter().map(|o| o.at("i")).collect();
        self.em.for_each(out_shape[0], |em| {
            for j in 0..n {
                em.line(format!("var {}: {} = {};", accs[j], tys[j].wgsl(), first[j]));
            }
            em.open(format!("for (var {k} = 1u; {k} < {len}u; {k}++)"));
            em.line(format!("let {c} = {step};"));
            for (j, a) in accs.iter().enumerate() {
                em.line(format!("{a} = {c}.v{j};"));
            }
            em.close();
            for j in 0..n {
                em.line(format!("{} = {};", lhs[j], accs[j]));
            }
        });
        self.em.barrier();
        Ok(outs.into_iter().map(V::T).collect())
    }

    /// All elements of 1-D blocks to scalars: per-invocation folds, then a tree.
    fn reduce_whole(
        &mut self,
        xs: &[Tensor],
        tys: &[Ty],
        call: &dyn Fn(&[String], &[String]) -> String,
    ) -> Vec<V> {
        let n = xs.len();
        let numel = xs[0].numel().max(1);
        let accs: Vec<String> = (0..n).map(|_| self.em.fresh("r")).collect();
        for (a, t) in accs.iter().zip(tys) {
            self.em.line(format!("var {a}: {};", t.wgsl()));
        }
        let own: Vec<String> = xs.iter().map(|x| x.at("i")).collect();
        let c = self.em.fresh("c");
        let step = call(&accs, &own);
        self.em.for_each(numel, |em| {
            // Element i = 0 is every owning invocation's first: the fold needs no identity.
            em.open("if (i == 0u)");
            for j in 0..n {
                em.line(format!("{} = {};", accs[j], own[j]));
            }
            em.else_();
            em.line(format!("let {c} = {step};"));
            for (j, a) in accs.iter().enumerate() {
                em.line(format!("{a} = {c}.v{j};"));
            }
            em.close();
        });
        let wg = self.em.wg;
        let valid = numel.min(wg);
        for (j, (a, t)) in accs.iter().zip(tys).enumerate() {
            self.em.use_scratch(j, wg);
            self.em.line(format!("wg{j}[lid] = {};", bits(a, *t)));
        }
        self.em.barrier();
        // Invocations [0, nv) hold partial results; step s folds lid + s into lid.
        let (nv, s) = (self.em.fresh("nv"), self.em.fresh("s"));
        self.em.line(format!("var {nv}: u32 = {valid}u;"));
        self.em.open(format!("for (var {s} = {}u; {s} > 0u; {s} >>= 1u)", wg / 2));
        self.em.open(format!("if (lid < {s} && lid + {s} < {nv})"));
        let mine: Vec<String> = (0..n).map(|j| unbits(&format!("wg{j}[lid]"), tys[j])).collect();
        let theirs: Vec<String> =
            (0..n).map(|j| unbits(&format!("wg{j}[lid + {s}]"), tys[j])).collect();
        self.em.line(format!("let {c} = {};", call(&mine, &theirs)));
        for (j, t) in tys.iter().enumerate() {
            self.em.line(format!("wg{j}[lid] = {};", bits(&format!("{c}.v{j}"), *t)));
        }
        self.em.close();
        self.em.line(format!("{nv} = min({nv}, {s});"));
        self.em.barrier();
        self.em.close();
        let mut out = Vec::new();
        for (j, t) in tys.iter().enumerate() {
            let (w, name) = (self.em.fresh("w"), self.em.fresh("t"));
            self.em.line(format!("let {w} = workgroupUniformLoad(&wg{j}[0]);"));
            self.em.line(format!("let {name}: {} = {};", t.wgsl(), unbits(&w, *t)));
            out.push(V::T(Tensor::scalar(name, *t)));
        }
        self.em.barrier();
        out
    }
    /// `tt.scan` (`tl.cumsum`, `tl.cummax`, ...): an inclusive Hillis-Steele scan along `axis`
    /// in workgroup memory, ping-ponging between the two scratch arrays (log2(len) passes).
    pub(super) fn scan(&mut self, op: &Op, ops: &[String]) -> Result<V> {
        if ops.len() != 1 {
            return Err(
                self.err(format!("scans of {} tensors at once are not supported", ops.len()))
            );
        }
        if op.body.contains("reverse = true") {
            return Err(self.err("reverse scans are not supported"));
        }
        let axis = parse::int_attr(&op.body, "axis").unwrap_or(0) as usize;
        let red = self.combiner(op)?;
        let v = self.get(&ops[0])?;
        let t = self.tensor(&v);
        self.check_rank(&t.shape)?;
        let (len, stride) = match (t.shape.as_slice(), axis) {
            ([n], 0) => (*n, 1),
            ([m, n], 0) => (*m, *n),
            ([_, n], 1) => (*n, 1),
            _ => return Err(self.err(format!("axis {axis} of shape {:?}", t.shape))),
        };
        let (ty, numel) = (t.ty, t.numel());
        let d = ty.dtype().unwrap_or(DType::I32);
        self.em.use_scratch(0, numel);
        self.em.use_scratch(1, numel);
        let b = bits(&t.at("i"), ty);
        self.em.for_each(numel, |em| em.line(format!("wg0[e] = {b};")));
        self.em.barrier();
        let mut src = 0;
        let mut step = 1;
        while step < len {
            let dst = 1 - src;
            let (cur, prev) = (
                unbits(&format!("wg{src}[e]"), ty),
                unbits(&format!("wg{src}[e - {}u]", step * stride), ty),
            );
            let comb = crate::value::normalize(
                &match red {
                    RedOp::Sum => format!("{prev} + {cur}"),
                    RedOp::Max => format!("max({prev}, {cur})"),
                    RedOp::Min => format!("min({prev}, {cur})"),
                },
                d,
            );
            let (keep, set) = (bits(&cur, ty), bits(&comb, ty));
            self.em.for_each(numel, |em| {
                em.open(format!("if ((e / {stride}u) % {len}u >= {step}u)"));
                em.line(format!("wg{dst}[e] = {set};"));
                em.else_();
                em.line(format!("wg{dst}[e] = {keep};"));
                em.close();
            });
            self.em.barrier();
            src = dst;
            step *= 2;
        }
        let out = self.em.decl_block(ty, &t.shape);
        let (lhs, rhs) = (out.at("i"), unbits(&format!("wg{src}[e]"), ty));
        self.em.for_each(numel, |em| em.line(format!("{lhs} = {rhs};")));
        self.em.barrier();
        Ok(V::T(out))
    }
}

/// Whether a combiner region is one of the identity-based reductions (sum/max/min of one
/// operand), which `Emitter::reduce` handles.
pub(super) fn is_simple(op: &Op) -> bool {
    let Some(r) = op.regions.first() else { return false };
    let body: Vec<&Op> = r.ops.iter().filter(|o| !o.name.ends_with(".return")).collect();
    let args: Vec<&str> = r.args.iter().map(|(n, _)| n.as_str()).collect();
    match body[..] {
        [c] => {
            let ins = operands(&c.body);
            ins.len() == 2
                && ins.iter().all(|i| args.contains(&i.as_str()))
                && matches!(
                    c.name.as_str(),
                    "arith.addf"
                        | "arith.addi"
                        | "arith.maxnumf"
                        | "arith.maximumf"
                        | "arith.maxsi"
                        | "arith.minnumf"
                        | "arith.minimumf"
                        | "arith.minsi"
                )
        }
        _ => false,
    }
}
