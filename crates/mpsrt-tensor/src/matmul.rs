//! Matrix products: `matmul` (NumPy semantics: 1-D/2-D/batched with broadcast batch dims),
//! `gemm` (ONNX Gemm: alpha, beta, transA, transB, optional broadcast C) and `linear`
//! (PyTorch: `x @ W^T + b`). Transposed and strided operands are passed to the kernels as
//! strides, never copied. f16 operands accumulate in f32; ints compute in f32.

use crate::activation::{maybe_apply, Activation};
use crate::{cpu, elementwise::same_place, gpu, Tensor};
use mpsrt_core::{broadcast_shapes, DType, Error, Layout, Place, Result};

/// The batched problem every backend solves: `out[z] = alpha * a[z] @ b[z] + beta * c`.
pub(crate) struct Problem<'a> {
    /// `[batch.., M, K]` and `[batch.., K, N]` views (batch dims already broadcast).
    pub a: Layout,
    pub b: Layout,
    pub a_t: &'a Tensor,
    pub b_t: &'a Tensor,
    pub batch: Vec<usize>,
    pub mnk: [usize; 3],
    /// C broadcast to `[M, N]` (f32 or f64), with alpha and beta.
    pub c: Option<(&'a Tensor, Layout)>,
    pub alpha: f64,
    pub beta: f64,
    /// Added to the result before `act`: contiguous f32 `[batch.., M, N]` (a conv's residual).
    pub res: Option<&'a Tensor>,
    /// Applied to the result (in the GPU GEMM's epilogue where it runs).
    pub act: Option<Activation>,
}

impl<'a> Problem<'a> {
    /// The same product (with C) without the residual and activation epilogue.
    pub(crate) fn without_epilogue(&self) -> Problem<'a> {
        Problem {
            a: self.a.clone(),
            b: self.b.clone(),
            a_t: self.a_t,
            b_t: self.b_t,
            batch: self.batch.clone(),
            mnk: self.mnk,
            c: self.c.clone(),
            alpha: self.alpha,
            beta: self.beta,
            res: None,
            act: None,
        }
    }
}

/// `t + res` (when given), then `act`: the epilogue of paths whose kernel cannot apply it.
pub(crate) fn epilogue_after(
    t: Tensor,
    res: Option<&Tensor>,
    act: Option<Activation>,
) -> Result<Tensor> {
    let t = match res {
        Some(r) => {
            crate::add(&t, &r.reshape(&t.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?)?
        }
        None => t,
    };
    maybe_apply(t, act)
}

fn compute_dtype(op: &str, a: DType, b: DType) -> Result<(DType, DType)> {
    let d = a.promote(b);
    if d == DType::Bool {
        return Err(Error::dtype(op, "bool tensors are not supported; cast to float32 first"));
    }
    Ok(if d.is_float() { (d, d) } else { (DType::F32, d) })
}

fn solve(op: &str, p: &Problem<'_>, place: Place) -> Result<Tensor> {
    match place {
        Place::Cpu => {
            let t = match cpu::gemm::matmul(p) {
                Some(t) => t,
                None => cpu::matmul::matmul(p)?,
            };
            epilogue_after(t, p.res, p.act)
        }
        Place::Gpu(i) => gpu::matmul::matmul(op, i, p),
    }
}

/// NumPy `matmul`: 1-D operands are promoted (and the added dim removed), batch dims broadcast.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = "matmul";
    let place = same_place(op, &[a, b])?;
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::shape(
            op,
            format!(
                "operands must be at least 1-D, got shapes {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let (cd, out_d) = compute_dtype(op, a.dtype(), b.dtype())?;
    let a2 = if a.ndim() == 1 { a.unsqueeze(0)? } else { a.clone() };
    let b2 = if b.ndim() == 1 { b.unsqueeze(1)? } else { b.clone() };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let (m, k) = (a2.shape()[ra - 2], a2.shape()[ra - 1]);
    let (k2, n) = (b2.shape()[rb - 2], b2.shape()[rb - 1]);
    if k != k2 {
        return Err(Error::shape(
            op,
            format!(
                "inner dimensions differ: a has shape {:?} (K = {k}), b has shape {:?} (K = {k2})",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let batch = broadcast_shapes(op, &a2.shape()[..ra - 2], &b2.shape()[..rb - 2])?;
    let (a2, b2) = (a2.astype(cd)?, b2.astype(cd)?);
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([k, n]);
    let p = Problem {
        a: a2.layout().broadcast_to(op, &sa)?,
        b: b2.layout().broadcast_to(op, &sb)?,
        a_t: &a2,
        b_t: &b2,
        batch: batch.clone(),
        mnk: [m, n, k],
        c: None,
        alpha: 1.0,
        beta: 0.0,
        res: None,
        act: None,
    };
    let out = solve(op, &p, place)?;
    let mut shape: Vec<isize> = batch.iter().map(|&d| d as isize).collect();
    if a.ndim() > 1 {
        shape.push(m as isize);
    }
    if b.ndim() > 1 {
        shape.push(n as isize);
    }
    out.reshape(&shape)?.astype(out_d)
}

/// `a @ b` for 4-D `[B, H, M, K] @ [B, H, K, N]` products (no broadcast), returned as the
/// `[B, H, M, N]` view of a `[B, M, H, N]` buffer: attention's `p·v`, after which exporters
/// transpose the heads back and merge them (`[B, M, H·N]`), then a view instead of a copy.
/// On GPUs the tiled GEMM stores at those strides where it runs the f32 product as one
/// unsplit dispatch; otherwise (and on the CPU) the plain product is permuted once, the copy
/// the merge would have made.
pub fn matmul_seq_major(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = "matmul_seq_major";
    let place = same_place(op, &[a, b])?;
    let (sa, sb) = (a.shape(), b.shape());
    if a.ndim() != 4 || b.ndim() != 4 || sa[..2] != sb[..2] || sa[3] != sb[2] {
        return Err(Error::shape(
            op,
            format!("expected [B, H, M, K] and [B, H, K, N], got {sa:?} and {sb:?}"),
        ));
    }
    let [bb, h, m, k] = [sa[0], sa[1], sa[2], sa[3]];
    let n = sb[3];
    let seq = [0, 2, 1, 3];
    if let Place::Gpu(i) = place {
        let p = Problem {
            a: a.layout().clone(),
            b: b.layout().clone(),
            a_t: a,
            b_t: b,
            batch: vec![bb, h],
            mnk: [m, n, k],
            c: None,
            alpha: 1.0,
            beta: 0.0,
            res: None,
            act: None,
        };
        let (hn, mhn) = ((h * n) as isize, (m * h * n) as isize);
        let out =
            Layout { shape: vec![bb, h, m, n], strides: vec![mhn, n as isize, hn, 1], offset: 0 };
        if let Some(y) = gpu::matmul_strided::matmul_strided(op, i, &p, &out)? {
            return Ok(y);
        }
    }
    matmul(a, b)?.permute(&seq)?.contiguous()?.permute(&seq)
}

/// ONNX Gemm: `alpha * op(A) @ op(B) + beta * C` with 2-D A and B, `op` = optional transpose,
/// and C broadcastable to `[M, N]`.
pub fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    gemm_op("gemm", a, b, c, alpha, beta, trans_a, trans_b, None)
}

/// [`gemm`] followed by `act`, applied in the GPU kernel's epilogue where it runs (no extra
/// pass over the result); the values equal `act.apply(&gemm(..)?)`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_act(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
    act: Option<Activation>,
) -> Result<Tensor> {
    gemm_op("gemm", a, b, c, alpha, beta, trans_a, trans_b, act)
}

#[allow(clippy::too_many_arguments)]
fn gemm_op(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
    act: Option<Activation>,
) -> Result<Tensor> {
    let mut ts = vec![a, b];
    ts.extend(c);
    let place = same_place(op, &ts)?;
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(Error::shape(
            op,
            format!("A and B must be 2-D, got shapes {:?} and {:?}", a.shape(), b.shape()),
        ));
    }
    let (cd, out_d) = compute_dtype(op, a.dtype(), b.dtype())?;
    let a2 = if trans_a { a.transpose(0, 1)? } else { a.clone() }.astype(cd)?;
    let b2 = if trans_b { b.transpose(0, 1)? } else { b.clone() }.astype(cd)?;
    let (m, k) = (a2.shape()[0], a2.shape()[1]);
    let (k2, n) = (b2.shape()[0], b2.shape()[1]);
    if k != k2 {
        return Err(Error::shape(
            op,
            format!(
                "inner dimensions differ: A {:?} (trans_a={trans_a}) gives K = {k}, B {:?} (trans_b={trans_b}) gives K = {k2}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let acc = if cd == DType::F64 { DType::F64 } else { DType::F32 };
    let c2 = match c {
        Some(c) => Some(c.astype(acc)?),
        None => None,
    };
    let cl = match &c2 {
        Some(t) => Some(t.layout().broadcast_to(op, &[m, n]).map_err(|_| {
            Error::shape(op, format!("C of shape {:?} cannot broadcast to [{m}, {n}]", t.shape()))
        })?),
        None => None,
    };
    let p = Problem {
        a: a2.layout().clone(),
        b: b2.layout().clone(),
        a_t: &a2,
        b_t: &b2,
        batch: vec![],
        mnk: [m, n, k],
        c: c2.as_ref().zip(cl),
        alpha,
        beta,
        res: None,
        act,
    };
    solve(op, &p, place)?.reshape(&[m as isize, n as isize])?.astype(out_d)
}

fn p_numel(batch: &[usize], m: usize, n: usize) -> usize {
    batch.iter().product::<usize>() * m * n
}

/// Batched `a @ b + c (+ res)` then `act`, for float operands of ≥ 2 dims whose batch dims broadcast and
/// a `c` broadcast to `[M, N]` for every batch entry (a conv's per-channel bias): one GPU kernel
/// does all of it. The result is f32 `[batch.., M, N]`.
pub(crate) fn matmul_epilogue(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    res: Option<&Tensor>,
    act: Option<Activation>,
) -> Result<Tensor> {
    let place = same_place(op, &[a, b])?;
    let (ra, rb) = (a.ndim(), b.ndim());
    if ra < 2 || rb < 2 || a.shape()[ra - 1] != b.shape()[rb - 2] {
        return Err(Error::shape(
            op,
            format!("internal: cannot multiply {:?} by {:?}", a.shape(), b.shape()),
        ));
    }
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let batch = broadcast_shapes(op, &a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
    let (a, b) = (a.astype(DType::F32)?, b.astype(DType::F32)?);
    let c = c.map(|c| c.astype(DType::F32)).transpose()?;
    let cl = c.as_ref().map(|t| t.layout().broadcast_to(op, &[m, n])).transpose()?;
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([k, n]);
    let res = match res {
        Some(r) if r.numel() == p_numel(&batch, m, n) => Some(r.astype(DType::F32)?.contiguous()?),
        Some(r) => {
            return Err(Error::shape(
                op,
                format!("residual of shape {:?} does not match the [{m}, {n}] product", r.shape()),
            ))
        }
        None => None,
    };
    let p = Problem {
        a: a.layout().broadcast_to(op, &sa)?,
        b: b.layout().broadcast_to(op, &sb)?,
        a_t: &a,
        b_t: &b,
        batch,
        mnk: [m, n, k],
        c: c.as_ref().zip(cl),
        alpha: 1.0,
        beta: 1.0,
        res: res.as_ref(),
        act,
    };
    solve(op, &p, place)
}

/// NumPy `matmul` of operands of at least 2 dims, then `+ bias` (N values along the last
/// axis), `+ res` (a tensor of the product's shape), then `act` — a linear layer's bias,
/// residual and activation (BERT's `MatMul → Add → Gelu` / `MatMul → Add → Add`). On the GPU
/// one GEMM dispatch applies them while storing (the tiled GEMM; for f16 operands the
/// matrix-unit GEMM's epilogue), every other route computes the product and applies the same
/// ops after, so the values equal the unfused ops' to rounding. f16 operands give an f16
/// result (accumulated in f32); the bias and residual are read in f32.
pub fn matmul_fused(
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    res: Option<&Tensor>,
    act: Option<Activation>,
) -> Result<Tensor> {
    let op = "matmul_fused";
    let mut ts = vec![a, b];
    ts.extend(bias);
    ts.extend(res);
    let place = same_place(op, &ts)?;
    let (ra, rb) = (a.ndim(), b.ndim());
    if ra < 2 || rb < 2 || a.shape()[ra - 1] != b.shape()[rb - 2] {
        return Err(Error::shape(
            op,
            format!(
                "expected operands of at least 2 dims with matching inner dims, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let batch = broadcast_shapes(op, &a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let (cd, out_d) = compute_dtype(op, a.dtype(), b.dtype())?;
    let acc = if cd == DType::F64 { DType::F64 } else { DType::F32 };
    let (a2, b2) = (a.astype(cd)?, b.astype(cd)?);
    let c = match bias {
        Some(t) if t.numel() == n && t.shape().iter().rev().skip(1).all(|&d| d == 1) => {
            Some(t.reshape(&[n as isize])?.astype(acc)?)
        }
        Some(t) => {
            return Err(Error::shape(
                op,
                format!("bias of shape {:?} is not {n} values along the last axis", t.shape()),
            ))
        }
        None => None,
    };
    let cl = c.as_ref().map(|t| t.layout().broadcast_to(op, &[m, n])).transpose()?;
    let res = match res {
        Some(r) if r.shape() == out_shape.as_slice() => {
            let r = r.astype(acc)?;
            // The kernels index the residual like their output: dense from element 0.
            Some(if r.is_contiguous() && r.layout().offset == 0 {
                r
            } else {
                crate::elementwise::map(op, &[&r], acc, mpsrt_kernels::Expr::input(0), &[])?
            })
        }
        Some(r) => {
            return Err(Error::shape(
                op,
                format!("residual of shape {:?} is not the product's {out_shape:?}", r.shape()),
            ))
        }
        None => None,
    };
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([k, n]);
    let p = Problem {
        a: a2.layout().broadcast_to(op, &sa)?,
        b: b2.layout().broadcast_to(op, &sb)?,
        a_t: &a2,
        b_t: &b2,
        batch,
        mnk: [m, n, k],
        c: c.as_ref().zip(cl),
        alpha: 1.0,
        beta: 1.0,
        res: res.as_ref(),
        act,
    };
    let shape: Vec<isize> = out_shape.iter().map(|&d| d as isize).collect();
    solve(op, &p, place)?.reshape(&shape)?.astype(out_d)
}

/// PyTorch `linear`: `x @ weight^T + bias` with `x` of shape `[..., in]`, `weight` `[out, in]`,
/// `bias` `[out]`.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let op = "linear";
    if x.ndim() == 0 || weight.ndim() != 2 {
        return Err(Error::shape(
            op,
            format!(
                "expected x [..., in] and weight [out, in], got {:?} and {:?}",
                x.shape(),
                weight.shape()
            ),
        ));
    }
    let inf = *x.shape().last().unwrap_or(&0);
    if weight.shape()[1] != inf {
        return Err(Error::shape(
            op,
            format!(
                "inner dimensions differ: x {:?} has {inf} features, weight {:?} expects {}",
                x.shape(),
                weight.shape(),
                weight.shape()[1]
            ),
        ));
    }
    let outf = weight.shape()[0];
    if let Some(b) = bias {
        if b.shape() != [outf] {
            return Err(Error::shape(
                op,
                format!("bias must have shape [{outf}], got {:?}", b.shape()),
            ));
        }
    }
    let x2 = x.reshape(&[-1, inf as isize])?;
    let y = gemm_op(op, &x2, weight, bias, 1.0, 1.0, false, true, None)?;
    let mut shape: Vec<isize> = x.shape()[..x.ndim() - 1].iter().map(|&d| d as isize).collect();
    shape.push(outf as isize);
    y.reshape(&shape)
}
