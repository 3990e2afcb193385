//! Launch of the fused squeeze-excitation gate (`mpsrt-kernels/src/conv_se.rs`): the two 1×1
//! convs of an SE block on its pooled `[N, C, 1, 1]` vector, with their biases and
//! activations, as one dispatch of one workgroup per image (issue 22).

use super::alloc_out;
use super::conv::{as_f32, buffer, meta_bytes};
use crate::activation::Activation;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Place, Result};
use mpsrt_kernels::{se_gate_kernel, MatmulAct, SE_MAX_C, SE_MAX_C4};
use mpsrt_runtime::{Binding, Kernel, Pipeline, Storage};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// `act2(conv(act1(conv(p, w1, b1)), w2, b2))` for `p` `[N, C, 1, 1]`, `w1` `[C4, C, 1, 1]`,
/// `b1` `[C4]`, `w2` `[C, C4, 1, 1]`, `b2` `[C]` on a GPU, as one dispatch: a `[N, C, 1, 1]`
/// gate, equal to the two convs up to float rounding (another summation order). `None` when
/// the operands are not of that form, not on one GPU, or past the kernel's limits
/// (C ≤ 2048, C4 ≤ 256) — the caller then runs the convs.
pub fn se_gate(
    p: &Tensor,
    (w1, b1, act1): (&Tensor, &Tensor, Option<Activation>),
    (w2, b2, act2): (&Tensor, &Tensor, Option<Activation>),
) -> Result<Option<Tensor>> {
    let op = "se_gate";
    let Place::Gpu(d) = p.place() else { return Ok(None) };
    let [n, c, 1, 1] = *p.shape() else { return Ok(None) };
    let c4 = w1.shape().first().copied().unwrap_or(0);
    let fits = w1.shape() == [c4, c, 1, 1]
        && b1.shape() == [c4]
        && w2.shape() == [c, c4, 1, 1]
        && b2.shape() == [c]
        && [w1, b1, w2, b2].iter().all(|t| t.place() == p.place())
        && (1..=SE_MAX_C).contains(&c)
        && (1..=SE_MAX_C4).contains(&c4)
        && n > 0
        && n <= 65535;
    if !fits {
        return Ok(None);
    }
    let dev = mpsrt_runtime::gpu_device(d)?;
    let dtype = p.dtype();
    let [p, w1, b1, w2, b2] = [p, w1, b1, w2, b2].map(|t| as_f32(t).and_then(|t| t.contiguous()));
    let (p, w1, b1, w2, b2) = (p?, w1?, b1?, w2?, b2?);
    let (k1, p0, p1) = act1.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let (k2, q0, q1) = act2.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    type Cache = parking_lot::Mutex<HashMap<(usize, MatmulAct, MatmulAct), Arc<Pipeline>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (dev.index(), k1, k2);
    let cached = cache.lock().get(&key).cloned();
    let pipeline = match cached {
        Some(pl) => pl,
        None => {
            let src = se_gate_kernel(k1, k2);
            let pl = dev.pipeline(Kernel { source: &src, entry: "main" })?;
            cache.lock().insert(key, pl.clone());
            pl
        }
    };
    let out = alloc_out(&dev, op, n * c, 4)?;
    let off = |t: &Tensor| t.layout().offset as u32;
    let mut words = [0u32; 16];
    words[..8].copy_from_slice(&[
        c as u32,
        c4 as u32,
        off(&p),
        p0.to_bits(),
        off(&w1),
        off(&b1),
        off(&w2),
        off(&b2),
    ]);
    words[13] = q0.to_bits();
    words[14] = q1.to_bits();
    words[15] = p1.to_bits();
    let bindings = [
        Binding::from(&**buffer(op, &p)?),
        Binding::from(&**buffer(op, &w1)?),
        Binding::from(&**buffer(op, &b1)?),
        Binding::from(&**buffer(op, &w2)?),
        Binding::from(&**buffer(op, &b2)?),
        Binding::from(&out),
    ];
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 4), [n as u32, 1, 1])?;
    let y = Tensor::from_parts(
        Storage::Gpu(Arc::new(out)),
        Layout::contiguous(&[n, c, 1, 1]),
        DType::F32,
    );
    Ok(Some(y.astype(dtype)?))
}
