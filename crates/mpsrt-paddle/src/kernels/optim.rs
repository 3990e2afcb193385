//! Optimizer updates (`opt.step()`): `sgd`, `momentum`, `adam`, `adamw`, composed from
//! mpsrt-tensor ops with the formulas of Paddle's CPU kernels. The learning rate and the
//! `beta*_pow` accumulators arrive as 1-element device tensors and stay on the device (they
//! broadcast), so a step never reads back to the host. Outputs alias their inputs (Paddle
//! updates in place): every result is computed before any output is written.
//!
//! `multi_precision` (float16 parameters with a float32 master copy, as AMP's O2 and
//! `multi_precision=True` optimizers pass them): the update runs on the master copy in float32
//! (gradient widened), the new master is written to `master_param_out` and its float16
//! rounding to `param_out`, as Paddle's own kernels do.

use super::{kernel, vty, Call, KernelDef};
use mpsrt_core::{DType, Error, Result};
use mpsrt_tensor::{self as mt, Tensor};
use std::ffi::c_void;

const F: &[DType] = &[DType::F32, DType::F16];

/// A `[1]` tensor as a broadcastable scalar for `like`.
fn bscalar(t: &Tensor, like: &Tensor) -> Result<Tensor> {
    t.astype(like.dtype())?.reshape(&vec![1; like.ndim()])
}

/// The parameter the update runs on and the gradient in its precision: the float32 master copy
/// (input `i`) when `multi_precision` and Paddle passes one, else the parameter itself.
/// Returns (working parameter, gradient, whether a master copy is updated).
fn working(
    c: &Call,
    p: &Tensor,
    g: &Tensor,
    i: usize,
    multi_precision: bool,
) -> Result<(Tensor, Tensor, bool)> {
    let master = if multi_precision { c.opt_input(i)? } else { None };
    let has = master.is_some();
    let w = match master {
        Some(m) if m.shape() != p.shape() => {
            return Err(Error::shape(
                c.name,
                format!("master_param {:?} vs param {:?}", m.shape(), p.shape()),
            ))
        }
        Some(m) => m,
        None => p.clone(),
    };
    let g = g.astype(w.dtype())?;
    Ok((w, g, has))
}

/// Store the new working parameter: `param_out` (cast to the parameter's type) and, with a
/// master copy, `master_param_out`.
fn store_param(
    c: &Call,
    new: &Tensor,
    p_out: usize,
    master_out: usize,
    master: bool,
) -> Result<()> {
    c.store(p_out, new)?;
    if master && c.wants(master_out) {
        c.store(master_out, new)?;
    }
    Ok(())
}

/// `sgd(param, learning_rate, grad, master_param?, multi_precision) -> (param_out,
/// master_param_out)`.
fn sgd(c: &Call) -> Result<()> {
    let (p, lr, g) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let (p, g, master) = working(c, &p, &g, 3, c.bool(0))?;
    let out = mt::subtract(&p, &mt::multiply(&g, &bscalar(&lr, &p)?)?)?;
    store_param(c, &out, 0, 1, master)
}

/// `momentum(param, grad, velocity, learning_rate, master_param?, mu, use_nesterov,
/// regularization_method, regularization_coeff, multi_precision, rescale_grad) ->
/// (param_out, velocity_out, master_param_out)`.
fn momentum(c: &Call) -> Result<()> {
    let (p, g, v, lr) = (c.input(0)?, c.input(1)?, c.input(2)?, c.input(3)?);
    let (p, g, master) = working(c, &p, &g, 4, c.bool(4))?;
    let v = v.astype(p.dtype())?;
    let (mu, nesterov) = (c.float(0), c.bool(1));
    let mut g = mt::multiply_scalar(&g, c.float(5))?;
    match c.string(2) {
        "l2_decay" => g = mt::add(&g, &mt::multiply_scalar(&p, c.float(3))?)?,
        "" => {}
        other => {
            return Err(Error::unsupported(c.name, format!("regularization_method {other:?}")))
        }
    }
    let lr = bscalar(&lr, &p)?;
    let v_out = mt::add(&mt::multiply_scalar(&v, mu)?, &g)?;
    let p_out = if nesterov {
        mt::subtract(&p, &mt::multiply(&mt::add(&g, &mt::multiply_scalar(&v_out, mu)?)?, &lr)?)?
    } else {
        mt::subtract(&p, &mt::multiply(&v_out, &lr)?)?
    };
    store_param(c, &p_out, 0, 2, master)?;
    c.store(1, &v_out)
}

/// The Adam family's shared update. `decay`: AdamW's decoupled weight decay `(lr_ratio,
/// coeff)`. Inputs: param, grad, learning_rate, moment1, moment2, moment2_max?, beta1_pow,
/// beta2_pow, master_param?, skip_update?; attributes start with beta1, beta2, epsilon.
/// Outputs: param, moment1, moment2, moment2_max, beta1_pow, beta2_pow, master_param.
fn adam_update(c: &Call, decay: Option<(f64, f64)>, attrs: AdamAttrs) -> Result<()> {
    let (p, g, lr) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let (m1, m2, b1p, b2p) = (c.input(3)?, c.input(4)?, c.input(6)?, c.input(7)?);
    let (p_in, g_in) = (p.clone(), g);
    let (p, g, master) = working(c, &p_in, &g_in, 8, attrs.multi_precision)?;
    let (m1, m2) = (m1.astype(p.dtype())?, m2.astype(p.dtype())?);
    if let Some(skip) = c.opt_input(9)? {
        // A host read, only when the caller asks for conditional updates (AMP's found_inf).
        if skip.to_vec::<u8>()?.first().is_some_and(|&b| b != 0) {
            c.store(0, &p_in)?;
            if master && c.wants(6) {
                c.store(6, &p)?;
            }
            c.store(1, &m1)?;
            c.store(2, &m2)?;
            c.store(4, &b1p)?;
            return c.store(5, &b2p);
        }
    }
    let (b1, b2, eps) = (c.scalar(0).as_f64(), c.scalar(1).as_f64(), c.scalar(2).as_f64());
    let mut lr = bscalar(&lr, &p)?;
    let mut p0 = p.clone();
    if let Some((ratio, coeff)) = decay {
        lr = mt::multiply_scalar(&lr, ratio)?;
        // param ← param · (1 - lr · coeff), before the Adam step.
        p0 = mt::multiply(&p, &mt::rsubtract_scalar(1.0, &mt::multiply_scalar(&lr, coeff)?)?)?;
    }
    let m1o = mt::add(&mt::multiply_scalar(&m1, b1)?, &mt::multiply_scalar(&g, 1.0 - b1)?)?;
    let m2o = mt::add(
        &mt::multiply_scalar(&m2, b2)?,
        &mt::multiply_scalar(&mt::multiply(&g, &g)?, 1.0 - b2)?,
    )?;
    let (b1p_, b2p_) = (bscalar(&b1p, &p)?, bscalar(&b2p, &p)?);
    let denom_src = if attrs.amsgrad {
        let mx = c.input(5)?.astype(p.dtype())?;
        let mo = mt::maximum(&mx, &m2o)?;
        c.store(3, &mo)?;
        mo
    } else {
        m2o.clone()
    };
    // lr_t = lr · sqrt(1 - β2ᵗ) / (1 - β1ᵗ); p -= lr_t · m1 / (sqrt(m2) + ε · sqrt(1 - β2ᵗ)).
    let c2 = mt::sqrt(&mt::rsubtract_scalar(1.0, &b2p_)?)?;
    let lr_t = mt::divide(&mt::multiply(&lr, &c2)?, &mt::rsubtract_scalar(1.0, &b1p_)?)?;
    let denom = mt::add(&mt::sqrt(&denom_src)?, &mt::multiply_scalar(&c2, eps)?)?;
    let p_out = mt::subtract(&p0, &mt::multiply(&lr_t, &mt::divide(&m1o, &denom)?)?)?;
    store_param(c, &p_out, 0, 6, master)?;
    c.store(1, &m1o)?;
    c.store(2, &m2o)?;
    if !attrs.use_global_beta_pow {
        c.store(4, &mt::multiply_scalar(&b1p, b1)?)?;
        c.store(5, &mt::multiply_scalar(&b2p, b2)?)?;
    }
    Ok(())
}

struct AdamAttrs {
    multi_precision: bool,
    use_global_beta_pow: bool,
    amsgrad: bool,
}

/// `adam(..., beta1, beta2, epsilon, lazy_mode, min_row_size_to_use_multithread,
/// multi_precision, use_global_beta_pow, amsgrad)`.
fn adam(c: &Call) -> Result<()> {
    let a = AdamAttrs {
        multi_precision: c.bool(5),
        use_global_beta_pow: c.bool(6),
        amsgrad: c.bool(7),
    };
    adam_update(c, None, a)
}

/// `adamw(..., beta1, beta2, epsilon, lr_ratio, coeff, with_decay, lazy_mode,
/// min_row_size_to_use_multithread, multi_precision, use_global_beta_pow, amsgrad)`.
fn adamw(c: &Call) -> Result<()> {
    let a = AdamAttrs {
        multi_precision: c.bool(8),
        use_global_beta_pow: c.bool(9),
        amsgrad: c.bool(10),
    };
    let (ratio, coeff) = (c.float(3), c.float(4));
    let decay = if c.bool(5) { Some((ratio, coeff)) } else { Some((ratio, 0.0)) };
    adam_update(c, decay, a)
}

/// The optimizer kernels.
pub fn all() -> Vec<KernelDef> {
    vec![
        kernel!("sgd", sgd, F, [p: In, lr: In, g: In, master: OptIn, mp: Bool, p_out: Out, master_out: Out]),
        kernel!("momentum", momentum, F, [p: In, g: In, v: In, lr: In, master: OptIn, mu: F32, nesterov: Bool, reg: Str, reg_coeff: F32, mp: Bool, rescale: F32,
            p_out: Out, v_out: Out, master_out: Out]),
        kernel!("adam", adam, F, [p: In, g: In, lr: In, m1: In, m2: In, m2max: OptIn, b1p: In, b2p: In, master: OptIn, skip: OptIn,
            beta1: Scalar, beta2: Scalar, eps: Scalar, lazy: Bool, min_rows: I64, mp: Bool, global_pow: Bool, amsgrad: Bool,
            p_out: Out, m1_out: Out, m2_out: Out, m2max_out: Out, b1p_out: Out, b2p_out: Out, master_out: Out]),
        kernel!("adamw", adamw, F, [p: In, g: In, lr: In, m1: In, m2: In, m2max: OptIn, b1p: In, b2p: In, master: OptIn, skip: OptIn,
            beta1: Scalar, beta2: Scalar, eps: Scalar, lr_ratio: F32, coeff: F32, with_decay: Bool, lazy: Bool, min_rows: I64, mp: Bool, global_pow: Bool, amsgrad: Bool,
            p_out: Out, m1_out: Out, m2_out: Out, m2max_out: Out, b1p_out: Out, b2p_out: Out, master_out: Out]),
    ]
}
