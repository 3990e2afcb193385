//! Normalization: batch_norm (inference with running statistics, or training with batch
//! statistics), layer_norm, group_norm and instance_norm. Statistics come from one fused
//! mean/variance reduction (`moments`, f32 accumulation); the normalization is elementwise.

use crate::reduce::moments;
use crate::{
    add, add_scalar, divide, fused_elementwise, multiply, rdivide_scalar, rsubtract_scalar, sqrt,
    subtract, BinaryFn, Expr, Scalar, Tensor, UnaryFn, VType,
};
use mpsrt_core::{DType, Error, Result};

/// `(x - mean) / sqrt(var + eps) * weight + bias` with the output in x's float dtype.
fn normalize(
    x: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    eps: f64,
    affine: (Option<&Tensor>, Option<&Tensor>),
    pshape: &[isize],
) -> Result<Tensor> {
    let mut y = divide(&subtract(x, mean)?, &sqrt(&add_scalar(var, eps)?)?)?;
    if let Some(w) = affine.0 {
        y = multiply(&y, &w.reshape(pshape)?)?;
    }
    if let Some(b) = affine.1 {
        y = add(&y, &b.reshape(pshape)?)?;
    }
    y.astype(x.dtype().to_float())
}

fn channel_shape(op: &str, x: &Tensor) -> Result<(usize, Vec<isize>)> {
    if x.ndim() < 2 {
        return Err(Error::shape(op, format!("expected input [N, C, ...], got {:?}", x.shape())));
    }
    let c = x.shape()[1];
    let mut p = vec![1isize; x.ndim()];
    p[1] = c as isize;
    Ok((c, p))
}

fn check_param(op: &str, what: &str, t: Option<&Tensor>, n: usize) -> Result<()> {
    if let Some(t) = t {
        if t.numel() != n {
            return Err(Error::shape(
                op,
                format!("{what} must have {n} elements, got shape {:?}", t.shape()),
            ));
        }
    }
    Ok(())
}

/// Inference batch norm over channel dim 1 with running statistics `[C]`.
pub fn batch_norm(
    x: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = "batch_norm";
    let (c, p) = channel_shape(op, x)?;
    for (w, t) in [
        ("running_mean", Some(running_mean)),
        ("running_var", Some(running_var)),
        ("weight", weight),
        ("bias", bias),
    ] {
        check_param(op, w, t, c)?;
    }
    let out = x.dtype().to_float();
    if x.place().is_gpu() {
        // One generated kernel over x and the broadcast [C] parameters (computing a scale and
        // shift first would cost six more, tiny, dispatches).
        let param = |t: &Tensor| t.astype(out)?.reshape(&p);
        let mut ins = vec![x.clone(), param(running_mean)?, param(running_var)?];
        let i = Expr::input;
        let std = Expr::unary(
            UnaryFn::Sqrt,
            Expr::binary(BinaryFn::Add, i(2), Expr::Scalar(0, VType::Float)),
        );
        let centered = Expr::binary(BinaryFn::Sub, Expr::cast(VType::Float, i(0)), i(1));
        let mut e = Expr::binary(BinaryFn::Div, centered, std);
        if let Some(w) = weight {
            ins.push(param(w)?);
            e = Expr::binary(BinaryFn::Mul, e, i(ins.len() - 1));
        }
        if let Some(b) = bias {
            ins.push(param(b)?);
            e = Expr::binary(BinaryFn::Add, e, i(ins.len() - 1));
        }
        let refs: Vec<&Tensor> = ins.iter().collect();
        return fused_elementwise(op, &refs, out, e, &[Scalar::F(eps)]);
    }
    // CPU: fold the statistics into a per-channel scale and shift ([C]-sized work), then one
    // chunked pass `x * scale + shift` over the activation.
    let f32 = |t: &Tensor| t.astype(DType::F32);
    let inv_std = rdivide_scalar(1.0, &sqrt(&add_scalar(&f32(running_var)?, eps)?)?)?;
    let scale = match weight {
        Some(w) => multiply(&f32(w)?, &inv_std)?,
        None => inv_std,
    };
    let shifted = multiply(&f32(running_mean)?, &scale)?;
    let shift = match bias {
        Some(b) => subtract(&f32(b)?, &shifted)?,
        None => rsubtract_scalar(0.0, &shifted)?,
    };
    let expr = Expr::binary(
        BinaryFn::Add,
        Expr::binary(BinaryFn::Mul, Expr::cast(VType::Float, Expr::input(0)), Expr::input(1)),
        Expr::input(2),
    );
    let (scale, shift) = (scale.reshape(&p)?, shift.reshape(&p)?);
    let y = fused_elementwise(op, &[x, &scale, &shift], DType::F32.promote(out), expr, &[])?;
    y.astype(out)
}

/// Training batch norm: statistics over every dim but 1. Returns (output, batch mean `[C]`,
/// biased batch variance `[C]`).
pub fn batch_norm_train(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = "batch_norm";
    let (c, p) = channel_shape(op, x)?;
    check_param(op, "weight", weight, c)?;
    check_param(op, "bias", bias, c)?;
    let axes: Vec<usize> = (0..x.ndim()).filter(|&d| d != 1).collect();
    let (mean, var) = moments(x, &axes)?;
    let y = normalize(x, &mean, &var, eps, (weight, bias), &p)?;
    Ok((y, mean.reshape(&[c as isize])?, var.reshape(&[c as isize])?))
}

/// Layer norm over the trailing `normalized_shape` dims; weight/bias have that shape.
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = "layer_norm";
    let k = normalized_shape.len();
    if k == 0 || k > x.ndim() || x.shape()[x.ndim() - k..] != *normalized_shape {
        return Err(Error::shape(
            op,
            format!(
                "normalized_shape {normalized_shape:?} must match the trailing dims of {:?}",
                x.shape()
            ),
        ));
    }
    let n: usize = normalized_shape.iter().product();
    check_param(op, "weight", weight, n)?;
    check_param(op, "bias", bias, n)?;
    let axes: Vec<usize> = (x.ndim() - k..x.ndim()).collect();
    let (mean, var) = moments(x, &axes)?;
    let p: Vec<isize> = normalized_shape.iter().map(|&d| d as isize).collect();
    normalize(x, &mean, &var, eps, (weight, bias), &p)
}

/// Group norm: channels split into `num_groups`, statistics per (sample, group); per-channel
/// weight/bias `[C]`.
pub fn group_norm(
    x: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = "group_norm";
    let (c, p) = channel_shape(op, x)?;
    if num_groups == 0 || !c.is_multiple_of(num_groups) {
        return Err(Error::invalid(
            op,
            format!("{c} channels cannot be split into {num_groups} groups"),
        ));
    }
    check_param(op, "weight", weight, c)?;
    check_param(op, "bias", bias, c)?;
    let n = x.shape()[0];
    let per = x.numel() / (n * num_groups).max(1);
    let xr = x.reshape(&[n as isize, num_groups as isize, per as isize])?;
    let (mean, var) = moments(&xr, &[2])?;
    let y = normalize(&xr, &mean, &var, eps, (None, None), &[1])?;
    let y = y.reshape(&x.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?;
    normalize_affine(&y, weight, bias, &p)
}

fn normalize_affine(
    y: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    p: &[isize],
) -> Result<Tensor> {
    let d = y.dtype();
    let mut y = y.clone();
    if let Some(w) = w {
        y = multiply(&y, &w.reshape(p)?)?;
    }
    if let Some(b) = b {
        y = add(&y, &b.reshape(p)?)?;
    }
    y.astype(d)
}

/// Instance norm: statistics per (sample, channel) over the spatial dims.
pub fn instance_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let (c, _) = channel_shape("instance_norm", x)?;
    group_norm(x, c, weight, bias, eps)
}
