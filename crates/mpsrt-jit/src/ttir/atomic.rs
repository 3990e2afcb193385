//! `tt.atomic_rmw` and `tt.atomic_cas` on i32 and f32 buffers.
//!
//! WGSL has atomics on `atomic<i32>` / `atomic<u32>` only, so a buffer that any atomic touches
//! is declared `array<atomic<i32>>` (i32 tensors) or `array<atomic<u32>>` (f32 tensors, bit
//! patterns), and all of its loads and stores go through `atomicLoad` / `atomicStore`. Each
//! (buffer, op, value type) gets a helper `at{k}_{kind}_{ty}(p, v) -> old` (see
//! [`helper`]): native where WGSL has the op on that storage type (add, and, or, xor,
//! exchange; signed max/min on i32 storage, unsigned on u32), otherwise a compare-exchange loop
//! (f32 add; signed max/min on an f32 buffer's bits, which Triton's float `atomic_max` lowers
//! to; unsigned max/min on i32 storage). `atomic_cas` loops on `atomicCompareExchangeWeak`
//! until it succeeds or sees a different value (WGSL's weak exchange may fail spuriously).
//!
//! Memory order: WGSL atomics are relaxed; Triton's default `acq_rel` is not reproduced beyond
//! the atomicity of each operation (kernels that publish data through a flag need a barrier
//! that WGSL does not offer across workgroups).

use super::lower::{TtirLowerer, V};
use super::parse::Op;
use crate::value::{Tensor, Ty};
use mpsrt_core::{DType, Result};
use std::fmt::Write;

impl TtirLowerer {
    /// `tt.atomic_rmw KIND, sem, scope, %ptr, %val[, %mask]` and
    /// `tt.atomic_cas sem, scope, %ptr, %cmp, %val`.
    pub(super) fn atomic(&mut self, op: &Op, ops: &[String]) -> Result<V> {
        let cas = op.name == "tt.atomic_cas";
        let kind = if cas {
            "cas".to_string()
        } else {
            op.body.split([',', ' ']).next().unwrap_or("").to_string()
        };
        let want = if cas { 3 } else { 2 };
        if ops.len() < want {
            return Err(self.err(format!("expected {want} operands, got {}", ops.len())));
        }
        let p = self.get(&ops[0])?;
        let Ty::Ptr { arg, elem } = p.ty() else {
            return Err(self.err("the first operand is not a pointer"));
        };
        let crate::ArgSpec::Pointer { dtype: buf } = self.args[arg].spec else {
            return Err(self.err("the pointer does not come from a tensor argument"));
        };
        let ok_ty = |d: DType| matches!(d, DType::I32 | DType::F32);
        if !ok_ty(buf) || !ok_ty(elem) {
            return Err(self.err(format!(
                "atomics on {elem} (a {buf} tensor) are not supported: WGSL has 32-bit atomics only (int32, float32)"
            )));
        }
        let known =
            ["add", "fadd", "max", "min", "umax", "umin", "and", "or", "xor", "exch", "cas"];
        if !known.contains(&kind.as_str()) {
            return Err(self.err(format!("atomic `{kind}` is not supported")));
        }
        let fname = format!("at{arg}_{kind}_{}", Ty::D(elem).wgsl());
        let a = &mut self.args[arg];
        a.loaded = true;
        a.stored = true;
        if !a.atomics.iter().any(|(k, d)| *k == kind && *d == elem) {
            a.atomics.push((kind.clone(), elem));
        }
        let ty = Ty::D(elem);
        let vals: Vec<V> = ops[1..want].iter().map(|o| self.get(o)).collect::<Result<_>>()?;
        let mask = if cas { None } else { ops.get(2).map(|m| self.get(m)).transpose()? };
        let shape = p.shape().to_vec();
        if shape.is_empty() {
            // One atomic per program, as in Triton: invocation 0 performs it and shares the
            // old value through workgroup memory.
            let args: Vec<String> = vals.iter().map(|v| v.view().expr.clone()).collect();
            let (r, w, name) = (self.em.fresh("a"), self.em.fresh("w"), self.em.fresh("t"));
            self.em.use_scratch(0, 1);
            self.em.open("if (lid == 0u)");
            self.em.line(format!("var {r}: {} = {};", ty.wgsl(), zero(elem)));
            let m = mask.as_ref().map(|m| m.view().expr.clone());
            if let Some(m) = &m {
                self.em.open(format!("if ({m})"));
            }
            self.em.line(format!("{r} = {fname}({}, {});", p.view().expr, args.join(", ")));
            if m.is_some() {
                self.em.close();
            }
            self.em.line(format!("wg0[0] = {};", crate::emit::bits(&r, ty)));
            self.em.close();
            self.em.line(format!("let {w} = workgroupUniformLoad(&wg0[0]);"));
            self.em.line(format!("let {name}: {} = {};", ty.wgsl(), crate::emit::unbits(&w, ty)));
            self.em.barrier();
            return Ok(V::T(Tensor::scalar(name, ty)));
        }
        let pt = self.tensor(&p);
        let vts: Vec<Tensor> = vals.iter().map(|v| v.view().clone()).collect();
        let mt = mask.map(|m| m.view().clone());
        let out = self.em.decl_block(ty, &shape);
        let lhs = out.at("i");
        let call = format!(
            "{fname}({}, {})",
            pt.at("i"),
            vts.iter().map(|v| v.at("i")).collect::<Vec<_>>().join(", ")
        );
        let mi = mt.map(|m| m.at("i"));
        let z = zero(elem);
        self.em.for_each(out.numel(), |em| match &mi {
            None => em.line(format!("{lhs} = {call};")),
            Some(m) => {
                em.open(format!("if ({m})"));
                em.line(format!("{lhs} = {call};"));
                em.else_();
                em.line(format!("{lhs} = {z};"));
                em.close();
            }
        });
        Ok(V::T(out))
    }
}

fn zero(d: DType) -> &'static str {
    if d == DType::F32 {
        "0.0f"
    } else {
        "0i"
    }
}

/// The WGSL helper `at{k}_{kind}_{ty}` for buffer `k` of `buf` elements, holding values of
/// `elem` (the pointer's type: an f32 buffer may be reached through an i32 pointer).
pub(crate) fn helper(w: &mut String, k: usize, buf: DType, kind: &str, elem: DType, bounded: bool) {
    let vt = Ty::D(elem).wgsl();
    let st = if buf == DType::I32 { "i32" } else { "u32" };
    // Storage word <-> register value.
    let to_s = |e: &str| if vt == st { e.to_string() } else { format!("bitcast<{st}>({e})") };
    let from_s = |e: &str| if vt == st { e.to_string() } else { format!("bitcast<{vt}>({e})") };
    let name = format!("at{k}_{kind}_{vt}");
    let slot =
        format!("&buf{k}[{}]", crate::module::bix(k, &format!("u32(p + P.off{k})"), bounded));
    if kind == "cas" {
        let _ = writeln!(
            w,
            "fn {name}(p: i32, cmp: {vt}, v: {vt}) -> {vt} {{\n    var old: {st};\n    loop {{\n        let r = atomicCompareExchangeWeak({slot}, {}, {});\n        old = r.old_value;\n        if (r.exchanged || r.old_value != {}) {{\n            break;\n        }}\n    }}\n    return {};\n}}",
            to_s("cmp"),
            to_s("v"),
            to_s("cmp"),
            from_s("old")
        );
        return;
    }
    let native = match (kind, st, vt) {
        ("add", _, "i32") => Some("atomicAdd"),
        ("and", _, "i32") => Some("atomicAnd"),
        ("or", _, "i32") => Some("atomicOr"),
        ("xor", _, "i32") => Some("atomicXor"),
        ("exch", _, _) => Some("atomicExchange"),
        ("max", "i32", "i32") | ("umax", "u32", "i32") => Some("atomicMax"),
        ("min", "i32", "i32") | ("umin", "u32", "i32") => Some("atomicMin"),
        _ => None,
    };
    if let Some(f) = native {
        let _ = writeln!(
            w,
            "fn {name}(p: i32, v: {vt}) -> {vt} {{\n    return {};\n}}",
            from_s(&format!("{f}({slot}, {})", to_s("v")))
        );
        return;
    }
    // Compare-exchange loop: combine in the register type, retry until no one intervened.
    let comb = match kind {
        "fadd" | "add" => "a + v".to_string(),
        "max" => "max(a, v)".into(),
        "min" => "min(a, v)".into(),
        "umax" => "bitcast<i32>(max(bitcast<u32>(a), bitcast<u32>(v)))".into(),
        "umin" => "bitcast<i32>(min(bitcast<u32>(a), bitcast<u32>(v)))".into(),
        "and" | "or" | "xor" => {
            let op = match kind {
                "and" => "&",
                "or" => "|",
                _ => "^",
            };
            format!("bitcast<{vt}>(bitcast<u32>(a) {op} bitcast<u32>(v))")
        }
        _ => "v".into(),
    };
    let _ = writeln!(
        w,
        "fn {name}(p: i32, v: {vt}) -> {vt} {{\n    var old = atomicLoad({slot});\n    var a: {vt};\n    loop {{\n        a = {};\n        let r = atomicCompareExchangeWeak({slot}, old, {});\n        if (r.exchanged) {{\n            break;\n        }}\n        old = r.old_value;\n    }}\n    return a;\n}}",
        from_s("old"),
        to_s(&format!("({comb})"))
    );
}
