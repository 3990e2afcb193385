//! Fused attention against the composed ops (`matmul`, scale, mask add, `softmax`, `matmul`)
//! on GPU 0 at BERT-base / GPT-2 shapes, f32 and f16: one JSON object per line with both times
//! and the largest difference between the two results (a wrong fused kernel shows there).
//! Run: `cargo run --release -p mpsrt-tensor --example bench_attention`.

use mpsrt_tensor::{self as mt, DType, Place, Result, Scalar, SdpaOptions, Tensor};
use std::time::Instant;

fn time(
    iters: usize,
    dev: &mpsrt_runtime::GpuDevice,
    f: &dyn Fn() -> Result<Tensor>,
) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

/// The unfused formula on the same device.
fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    o: SdpaOptions,
) -> Result<Tensor> {
    let s = mt::multiply_scalar(&mt::matmul(q, &k.transpose(-1, -2)?)?, Scalar::F(o.scale))?;
    let s = match mask {
        Some(m) => mt::add(&s, m)?,
        None => s,
    };
    let s = match o.causal_offset {
        Some(_) => {
            let n = q.shape()[2];
            let bias: Vec<f32> =
                (0..n * n).map(|e| if e % n > e / n { f32::NEG_INFINITY } else { 0.0 }).collect();
            let b = Tensor::from_slice(&bias, &[n, n], q.place())?.astype(s.dtype())?;
            mt::add(&s, &b)?
        }
        None => s,
    };
    mt::matmul(&mt::softmax(&s, -1)?, v)
}

fn main() -> Result<()> {
    let p = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    // (name, batch, heads, seq, head size, causal)
    let cases = [
        ("bert_base", 1, 12, 128, 64, false),
        ("bert_base", 8, 12, 128, 64, false),
        ("gpt2_prefill", 1, 12, 1024, 64, true),
        ("long", 4, 16, 2048, 128, true),
    ];
    for dt in [DType::F32, DType::F16] {
        for (name, b, h, s, d, causal) in cases {
            let r = |shape: &[usize]| -> Result<Tensor> {
                mt::multiply_scalar(&mt::randn(shape, DType::F32, p)?, Scalar::F(0.5))?.astype(dt)
            };
            let (q, k, v) = (r(&[b, h, s, d])?, r(&[b, h, s, d])?, r(&[b, h, s, d])?);
            let mask = if causal { None } else { Some(mt::zeros(&[b, 1, 1, s], dt, p)?) };
            let o = SdpaOptions {
                scale: 1.0 / (d as f64).sqrt(),
                causal_offset: causal.then_some(0),
                seq_major: false,
            };
            let iters = if s >= 1024 { 10 } else { 50 };
            let fused = || mt::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), o);
            let unfused = || composed(&q, &k, &v, mask.as_ref(), o);
            let (a, bb) = (fused()?.astype(DType::F32)?, unfused()?.astype(DType::F32)?);
            let diff = mt::max(&mt::abs(&mt::subtract(&a, &bb)?)?, None, false)?.to_f64_vec()?[0];
            let tf = time(iters, &dev, &fused)?;
            let tu = time(iters, &dev, &unfused)?;
            let flops = 4.0 * (b * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
            println!(
                "{{\"bench\": \"attention_{}\", \"case\": \"{name}\", \"shape\": [{b}, {h}, {s}, {d}], \"causal\": {causal}, \"fused_ms\": {tf:.4}, \"unfused_ms\": {tu:.4}, \"fused_tflops\": {:.2}, \"max_abs_diff\": {diff:.2e}}}",
                dt,
                flops / (tf * 1e-3) / 1e12
            );
        }
    }
    Ok(())
}
