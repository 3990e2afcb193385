//! CPU reference for fused attention: per query row, the scaled scores, the mask and causal
//! bound, a max-subtracted softmax and the weighted sum of values, all in f64 (two passes over
//! the row, no online rescaling, so the GPU's flash-style kernel is checked against the plain
//! formula). Rows run in parallel on the CPU worker pool.

use crate::attention::Sdpa;
use crate::Tensor;
use mpsrt_core::{Place, Result};

pub(crate) fn sdpa(p: &Sdpa) -> Result<Tensor> {
    let [b, hq, hkv, sq, skv, d, dv] = p.dims();
    let groups = hq / hkv;
    let q = p.q.contiguous()?.to_f64_vec()?;
    let k = p.k.contiguous()?.to_f64_vec()?;
    let v = p.v.contiguous()?.to_f64_vec()?;
    let mask = p.mask.as_ref().map(|m| m.contiguous()?.to_f64_vec()).transpose()?;
    mpsrt_runtime::check_host_alloc(
        "scaled_dot_product_attention",
        (b * hq * sq).saturating_mul(dv + skv).saturating_mul(8),
    )?;
    let mut out = vec![0f32; b * hq * sq * dv];
    let (scale, causal) = (p.opts.scale, p.opts.causal_offset);
    super::par_chunks(&mut out, dv.max(1) * sq.max(1), |bh, chunk| {
        let (bi, h) = (bh / hq, bh % hq);
        let kh = bi * hkv + h / groups;
        let mut s = vec![0f64; skv];
        for (i, orow) in chunk.chunks_mut(dv.max(1)).enumerate().take(sq) {
            let qr = &q[(bh * sq + i) * d..][..d];
            let mut m = f64::NEG_INFINITY;
            for (j, sj) in s.iter_mut().enumerate() {
                let kr = &k[(kh * skv + j) * d..][..d];
                let mut x = qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() * scale;
                if let Some(mk) = &mask {
                    x += mk[(bh * sq + i) * skv + j];
                }
                if causal.is_some_and(|off| j as i64 > i as i64 + off) {
                    x = f64::NEG_INFINITY;
                }
                *sj = x;
                m = m.max(x);
            }
            if m == f64::NEG_INFINITY {
                orow.fill(0.0);
                continue;
            }
            let mut acc = vec![0f64; dv];
            let mut l = 0.0;
            for (j, &sj) in s.iter().enumerate() {
                let e = (sj - m).exp();
                l += e;
                let vr = &v[(kh * skv + j) * dv..][..dv];
                for (a, x) in acc.iter_mut().zip(vr) {
                    *a += e * x;
                }
            }
            for (o, a) in orow.iter_mut().zip(&acc) {
                *o = (a / l) as f32;
            }
        }
    });
    let y = Tensor::from_slice(&out, &[b, hq, sq, dv], Place::Cpu)?;
    let y = if p.opts.seq_major { y.permute(&[0, 2, 1, 3])?.contiguous()? } else { y };
    y.astype(p.q.dtype())
}
