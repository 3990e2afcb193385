//! `tl.load` / `tl.store`. Each pointer parameter `k` gets WGSL helpers `ld{k}(p)` / `st{k}(p, v)`
//! (generated in `module`, once the final access mode of the buffer is known) that add the
//! view offset and handle packed f16 / 8-bit storage.

use crate::emit::Emitter;
use crate::lower::Lowerer;
use crate::value::{cast_expr, Tensor, Ty, Val};
use mpsrt_core::{DType, Result};

type Kwargs = Vec<(String, Val)>;

/// Triton cache/eviction hints: no WGSL counterpart, accepted and ignored.
const HINTS: &[&str] = &["cache_modifier", "eviction_policy", "volatile"];

impl<'a> Lowerer<'a> {
    fn pointer(&self, v: Option<Val>, f: &str) -> Result<(Tensor, usize, DType)> {
        match v {
            Some(Val::T(t)) => match t.ty {
                Ty::Ptr { arg, elem } => Ok((t, arg, elem)),
                _ => Err(self.err(format!(
                    "{f}() needs a pointer (a tensor argument plus offsets), got {}",
                    t.ty.describe()
                ))),
            },
            Some(other) => {
                Err(self.err(format!("{f}() needs a pointer, got {}", other.describe())))
            }
            None => Err(self.err(format!("{f}() needs a pointer"))),
        }
    }

    /// The mask as a bool tensor broadcast to the pointer's shape.
    fn mask(&mut self, m: Option<Val>, shape: &[usize]) -> Result<Option<Tensor>> {
        let m = match m {
            None | Some(Val::None) => return Ok(None),
            Some(v) => self.tensor_of(v, Some(Ty::D(DType::Bool)))?,
        };
        if !self.broadcastable(&m.shape, shape) {
            return Err(self.err(format!(
                "mask shape {:?} does not broadcast to the pointer shape {:?}",
                m.shape, shape
            )));
        }
        let m = if m.ty == Ty::D(DType::Bool) { m } else { self.cast(&m, DType::Bool)? };
        // A scalar mask is used as is in every element's condition.
        Ok(Some(if m.is_block() { self.broadcast_to(&m, shape) } else { m }))
    }

    pub fn load(&mut self, args: Vec<Val>, kwargs: Kwargs) -> Result<Val> {
        let a = self.bind_load_store(
            "tl.load",
            &["pointer", "mask", "other", "boundary_check", "padding_option"],
            args,
            kwargs,
        )?;
        let (p, arg, elem) = self.pointer(a[0].clone(), "tl.load")?;
        if a[3].as_ref().is_some_and(|v| *v != Val::None && *v != Val::Tuple(vec![])) {
            return Err(self.err("boundary_check (block pointers) is not supported; use mask="));
        }
        self.args[arg].loaded = true;
        let shape = p.shape.clone();
        let mask = self.mask(a[1].clone(), &shape)?;
        let ty = Ty::D(elem);
        let other = match a[2].clone() {
            None | Some(Val::None) => None,
            Some(v) => {
                let t = self.tensor_of(v, Some(ty))?;
                if !self.broadcastable(&t.shape, &shape) {
                    return Err(self.err(format!(
                        "`other` shape {:?} does not broadcast to {:?}",
                        t.shape, shape
                    )));
                }
                let t = self.cast(&t, elem)?;
                Some(if t.is_block() { self.broadcast_to(&t, &shape) } else { t })
            }
        };
        Ok(Val::T(emit_load(&mut self.em, &p, arg, elem, mask.as_ref(), other.as_ref(), None)))
    }

    pub fn store(&mut self, args: Vec<Val>, kwargs: Kwargs) -> Result<Val> {
        let a = self.bind_load_store(
            "tl.store",
            &["pointer", "value", "mask", "boundary_check"],
            args,
            kwargs,
        )?;
        let (p, arg, elem) = self.pointer(a[0].clone(), "tl.store")?;
        if a[3].as_ref().is_some_and(|v| *v != Val::None && *v != Val::Tuple(vec![])) {
            return Err(self.err("boundary_check (block pointers) is not supported; use mask="));
        }
        self.args[arg].stored = true;
        let shape = p.shape.clone();
        let v = self.tensor_of(a[1].clone().unwrap_or_default(), Some(Ty::D(elem)))?;
        if !self.broadcastable(&v.shape, &shape) {
            return Err(self.err(format!(
                "stored value shape {:?} does not broadcast to the pointer shape {:?}",
                v.shape, shape
            )));
        }
        let Ty::D(vd) = v.ty else {
            return Err(self.err("storing pointers is not supported"));
        };
        let v = if v.is_block() { self.broadcast_to(&v, &shape) } else { v };
        let mask = self.mask(a[2].clone(), &shape)?;
        emit_store(&mut self.em, &p, arg, elem, &v, vd, mask.as_ref(), None);
        Ok(Val::None)
    }

    fn bind_load_store(
        &self,
        f: &str,
        names: &[&str],
        args: Vec<Val>,
        kwargs: Kwargs,
    ) -> Result<Vec<Option<Val>>> {
        let kwargs =
            kwargs.into_iter().filter(|(k, _)| !HINTS.contains(&k.as_str())).collect::<Vec<_>>();
        if args.len() > names.len() {
            return Err(
                self.err(format!("{f}() takes at most {} positional arguments", names.len()))
            );
        }
        let mut out: Vec<Option<Val>> = args.into_iter().map(Some).collect();
        out.resize(names.len(), None);
        for (k, v) in kwargs {
            let Some(p) = names.iter().position(|n| *n == k) else {
                return Err(self.err(format!("{f}() got an unsupported keyword argument `{k}`")));
            };
            out[p] = Some(v);
        }
        Ok(out)
    }
}

/// Emits a load through pointer `p` into parameter `arg`'s buffer (elements of `elem`), with an
/// optional bool `mask` and `other` (both scalars or already of `p`'s shape). Shared by the
/// Python and TTIR frontends.
///
/// `full` is a uniform WGSL condition under which the mask is known to be all true (a full
/// block: `offsets < n` with `max(offsets) < n`): the block then loads without per-element
/// tests, and only the last, partial block of a grid takes the masked path.
pub(crate) fn emit_load(
    em: &mut Emitter,
    p: &Tensor,
    arg: usize,
    elem: DType,
    mask: Option<&Tensor>,
    other: Option<&Tensor>,
    full: Option<&str>,
) -> Tensor {
    let ty = Ty::D(elem);
    let shape = p.shape.clone();
    let zero = crate::value::literal(0.0, elem);
    let other_at = |i: &str| other.as_ref().map_or(zero.clone(), |o| o.at(i));
    if !p.is_block() {
        // One invocation loads and the value is shared with workgroupUniformLoad: a value
        // read from storage is non-uniform in WGSL, and scalars may steer loops or `if`s
        // that contain barriers.
        let (v, w, name) = (em.fresh("l"), em.fresh("w"), em.fresh("t"));
        em.use_scratch(0, 1);
        em.open("if (lid == 0u)");
        match mask {
            None => em.line(format!("let {v}: {} = ld{arg}({});", ty.wgsl(), p.expr)),
            Some(m) => {
                em.line(format!("var {v}: {} = {};", ty.wgsl(), other_at("0u")));
                em.open(format!("if ({})", m.expr));
                em.line(format!("{v} = ld{arg}({});", p.expr));
                em.close();
            }
        }
        em.line(format!("wg0[0] = {};", crate::emit::bits(&v, ty)));
        em.close();
        em.line(format!("let {w} = workgroupUniformLoad(&wg0[0]);"));
        em.line(format!("let {name}: {} = {};", ty.wgsl(), crate::emit::unbits(&w, ty)));
        em.barrier();
        return Tensor::scalar(name, ty);
    }
    let (pi, oi) = (p.at("i"), other_at("i"));
    let mi = mask.as_ref().map(|m| m.at("i"));
    emit_block_load(em, &shape, arg, elem, &pi, mi.as_deref(), &oi, full)
}

/// The block case of [`emit_load`] from WGSL expressions of the per-element pointer `pi`, mask
/// `mi` and `other` value `oi` (they may read `i`, the private-array index, or `e`, the element
/// index): the TTIR frontend passes pointers and masks it can recompute from `e` (`remat`), so
/// their per-invocation arrays are never read and the driver drops them (fewer registers).
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_block_load(
    em: &mut Emitter,
    shape: &[usize],
    arg: usize,
    elem: DType,
    pi: &str,
    mi: Option<&str>,
    oi: &str,
    full: Option<&str>,
) -> Tensor {
    let out = em.decl_block(Ty::D(elem), shape);
    let lhs = out.at("i");
    if let (Some(f), Some(_)) = (full, &mi) {
        em.open(format!("if ({f})"));
        em.for_each(out.numel(), |em| em.line(format!("{lhs} = ld{arg}({pi});")));
        em.else_();
    }
    em.for_each(out.numel(), |em| match &mi {
        None => em.line(format!("{lhs} = ld{arg}({pi});")),
        // Masked-off lanes never touch memory: their addresses may be out of bounds.
        Some(m) => {
            em.open(format!("if ({m})"));
            em.line(format!("{lhs} = ld{arg}({pi});"));
            em.else_();
            em.line(format!("{lhs} = {oi};"));
            em.close();
        }
    });
    if full.is_some() && mi.is_some() {
        em.close();
    }
    out
}

/// Emits a store of `v` (element type `vd`, converted to `elem`) through pointer `p`; `full` as
/// in [`emit_load`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_store(
    em: &mut Emitter,
    p: &Tensor,
    arg: usize,
    elem: DType,
    v: &Tensor,
    vd: DType,
    mask: Option<&Tensor>,
    full: Option<&str>,
) {
    let pi = p.at("i");
    let mi = mask.as_ref().map(|m| m.at("i"));
    emit_store_exprs(em, p, &pi, arg, elem, v, vd, mi.as_deref(), full);
}

/// [`emit_store`] with WGSL expressions for the per-element pointer `pi` and mask `mi` (see
/// [`emit_block_load`]); `p` gives the shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_store_exprs(
    em: &mut Emitter,
    p: &Tensor,
    pi: &str,
    arg: usize,
    elem: DType,
    v: &Tensor,
    vd: DType,
    mi: Option<&str>,
    full: Option<&str>,
) {
    let vi = cast_expr(&v.at("i"), vd, elem);
    if elem == DType::F16 && em.native_f16_store {
        // `st{arg}` is a plain store into an `array<f16>` binding (`module::accessors`).
        em.uses_f16 = true;
    } else if elem == DType::F16 && paired_f16_store(em, p, pi, arg, &vi, mi, full) {
        return;
    }
    let body = |em: &mut crate::emit::Emitter| match &mi {
        None => em.line(format!("st{arg}({pi}, {vi});")),
        Some(m) => {
            em.open(format!("if ({m})"));
            em.line(format!("st{arg}({pi}, {vi});"));
            em.close();
        }
    };
    if p.is_block() {
        if let (Some(f), Some(_)) = (full, &mi) {
            em.open(format!("if ({f})"));
            em.for_each(p.numel(), |em| em.line(format!("st{arg}({pi}, {vi});")));
            em.else_();
            em.for_each(p.numel(), body);
            em.close();
        } else {
            em.for_each(p.numel(), body);
        }
    } else {
        // A scalar store is done by one invocation.
        em.open("if (lid == 0u)");
        body(em);
        em.close();
    }
}

/// A block store of f16 elements (packed two per word) where neighbouring elements `e` (even)
/// and `e + 1` usually land in one word: those are owned by invocations `lid` and `lid ^ 1` at
/// the same private index, so the pair swaps value, pointer and mask with
/// `subgroupShuffleXor(.., 1)` and the even one writes the whole word with one plain
/// `atomicStore` when the two pointers are consecutive, the first even, and both unmasked,
/// instead of an `atomicAnd` + `atomicOr` per element. Anything else (and pairs the shuffle did
/// not connect: the invocation id travels with the values and is checked, so nothing assumes
/// how invocations map onto subgroup lanes) takes the per-element path. Needs subgroups, and a
/// block that is a whole number of workgroups (the shuffles stay in uniform control flow);
/// returns `false` to leave the store to the caller.
fn paired_f16_store(
    em: &mut Emitter,
    p: &Tensor,
    pi: &str,
    arg: usize,
    vi: &str,
    mi: Option<&str>,
    full: Option<&str>,
) -> bool {
    let numel = p.numel();
    if !em.subgroups || !p.is_block() || em.wg < 2 || !numel.is_multiple_of(em.wg) {
        return false;
    }
    let mask = match (mi, full) {
        (None, _) => "true".to_string(),
        (Some(m), Some(f)) => format!("({f} || {m})"),
        (Some(m), None) => m.to_string(),
    };
    em.for_each(numel, |em| {
        em.line(format!("let sv: f32 = {vi};"));
        em.line(format!("let sp: i32 = {pi};"));
        em.line(format!("let sm: bool = {mask};"));
        em.line("let nb = subgroupShuffleXor(vec4<u32>(bitcast<u32>(sv), bitcast<u32>(sp), select(0u, 1u, sm), lid), 1u);");
        em.line("let odd = (lid & 1u) == 1u;");
        em.line("let np = bitcast<i32>(nb.y);");
        em.line("let nm = nb.z == 1u;");
        em.line("let p_lo = select(sp, np, odd);");
        em.line("let p_hi = select(np, sp, odd);");
        em.line(format!("let g = p_lo + P.off{arg};"));
        em.line("let whole = nb.w == (lid ^ 1u) && sm && nm && p_hi == p_lo + 1i && (g & 1i) == 0i;");
        em.open("if (whole)");
        em.open("if (!odd)");
        let at = crate::module::bix(arg, "u32(g) >> 1u", em.self_bounded);
        em.line(format!(
            "atomicStore(&buf{arg}[{at}], pack2x16float(vec2<f32>(sv, bitcast<f32>(nb.x))));"
        ));
        em.close();
        em.else_();
        em.open("if (sm)");
        em.line(format!("st{arg}(sp, sv);"));
        em.close();
        em.close();
    });
    true
}
