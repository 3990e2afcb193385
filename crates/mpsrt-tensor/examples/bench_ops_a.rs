//! Benchmarks for matmul, softmax and row sums on GPU 0: one JSON object per line
//! (`{"bench", "shape", "ms", "tflops" | "gbps"}`), timed after warm-up with `synchronize()`.
//! Run: `cargo run --release -p mpsrt-tensor --example bench_ops_a`.

use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
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

fn main() -> Result<()> {
    let p = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    let quick = std::env::var("BENCH_QUICK").is_ok();
    // `BENCH_ONLY=rows`: softmax and row sums only (no matmul history before them).
    let rows_only = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "rows");
    // `BENCH_ONLY=f16`: the gemv and f16 GEMM rows only, in a fresh process (the H100's clock
    // drops a few seconds into a busy Vulkan process).
    let f16_only = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "f16");
    // `BENCH_ONLY=bert`: BERT-base's f32 products only (A/B split-K in two processes with
    // `MPSRT_GEMM_SPLITK=0` and without: the knob is read once per process).
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "bert") {
        return bert(&dev);
    }
    let sizes: &[usize] = if rows_only || f16_only {
        &[]
    } else if quick {
        &[256]
    } else {
        &[512, 1024, 2048, 4096, 8192]
    };
    for &n in sizes {
        let a = mt::randn(&[n, n], DType::F32, p)?;
        let b = mt::randn(&[n, n], DType::F32, p)?;
        let iters = if n >= 4096 { 5 } else { 20 };
        let ms = time(iters, &dev, &|| mt::matmul(&a, &b))?;
        let tf = 2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e12;
        println!("{{\"bench\": \"matmul_f32\", \"shape\": [{n}, {n}, {n}], \"ms\": {ms:.4}, \"tflops\": {tf:.3}}}");
    }
    let k = if quick { 256 } else { 4096 };
    if !rows_only {
        matvec_and_f16(&dev, k)?;
    }
    if f16_only {
        return Ok(());
    }
    rows(&dev, if quick { 512 } else { 8192 })
}

/// BERT-base's f32 products at batch 1 (M = 128) and 8 (M = 1024): projections, FFN up and
/// down, merged Q/K/V, and the per-head attention products; 200 timed calls each.
fn bert(dev: &mpsrt_runtime::GpuDevice) -> Result<()> {
    let p = Place::Gpu(0);
    let knob = std::env::var("MPSRT_GEMM_SPLITK").unwrap_or_default();
    let shapes: &[(&[usize], &[usize])] = &[
        (&[128, 3072], &[3072, 768]),
        (&[128, 768], &[768, 768]),
        (&[128, 768], &[768, 2304]),
        (&[128, 768], &[768, 3072]),
        (&[1024, 3072], &[3072, 768]),
        (&[1024, 768], &[768, 768]),
        (&[1024, 768], &[768, 3072]),
        (&[12, 128, 64], &[12, 64, 128]),
        (&[12, 128, 128], &[12, 128, 64]),
    ];
    for &(sa, sb) in shapes {
        let a = mt::randn(sa, DType::F32, p)?;
        let b = mt::randn(sb, DType::F32, p)?;
        let ms = time(200, dev, &|| mt::matmul(&a, &b))?;
        let r = sa.len();
        let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        let z: usize = sa[..r - 2].iter().product();
        let tf = 2.0 * (z * m * n * k) as f64 / (ms * 1e-3) / 1e12;
        let plan = mt::plan_gemm([m, n, k], z, 128, 264);
        println!("{{\"bench\": \"matmul_f32_bert\", \"a\": {sa:?}, \"b\": {sb:?}, \"ms\": {ms:.4}, \"tflops\": {tf:.3}, \"default_plan_slices\": {}, \"MPSRT_GEMM_SPLITK\": \"{knob}\"}}", plan.slices);
    }
    Ok(())
}

fn matvec_and_f16(dev: &mpsrt_runtime::GpuDevice, k: usize) -> Result<()> {
    let p = Place::Gpu(0);
    let x = mt::randn(&[1, k], DType::F32, p)?;
    let w = mt::randn(&[k, k], DType::F32, p)?;
    let ms = time(20, dev, &|| mt::matmul(&x, &w))?;
    let gb = (k * k * 4) as f64 / (ms * 1e-3) / 1e9;
    let tf = 2.0 * (k * k) as f64 / (ms * 1e-3) / 1e12;
    println!("{{\"bench\": \"matmul_f32_gemv\", \"shape\": [1, {k}, {k}], \"ms\": {ms:.4}, \"tflops\": {tf:.4}, \"gbps\": {gb:.1}}}");
    f16_check()?;
    let a = mt::randn(&[k, k], DType::F32, p)?.astype(DType::F16)?;
    let b = mt::randn(&[k, k], DType::F32, p)?.astype(DType::F16)?;
    // 20 timed calls after 3 warm-ups, as `bench/torch_reference.py ops` times torch's.
    let ms = time(20, dev, &|| mt::matmul(&a, &b))?;
    let tf = 2.0 * (k as f64).powi(3) / (ms * 1e-3) / 1e12;
    let kernel = mt::matmul_kernel_name(0, DType::F16, [k, k, k])?;
    println!("{{\"bench\": \"matmul_f16\", \"shape\": [{k}, {k}, {k}], \"ms\": {ms:.4}, \"tflops\": {tf:.3}, \"kernel\": \"{kernel}\"}}");
    Ok(())
}

/// f16 matmuls on the GPU against the f32 CPU product of the same (f16-rounded) values: odd
/// sizes (partial tiles), a broadcast batch, and each operand once transposed (strided staging)
/// and once contiguous (8-wide staging), so a matrix-unit kernel that ran wrong shows here.
/// Prints the kernel and the largest error relative to max |reference|.
fn f16_check() -> Result<()> {
    let g = Place::Gpu(0);
    let (z, m, n, k) = (3usize, 200usize, 264usize, 136usize);
    let h = |shape: &[usize]| -> Result<Tensor> {
        mt::randn(shape, DType::F32, Place::Cpu)?.astype(DType::F16)
    };
    // (A [z, m, k] contiguous, B = [n, k]ᵀ) and (A = [z, k, m]ᵀ, B [k, n] contiguous).
    let cases = [
        ("a_bT", h(&[z, m, k])?, h(&[n, k])?.transpose(0, 1)?),
        ("aT_b", h(&[z, k, m])?.transpose(1, 2)?, h(&[k, n])?),
    ];
    for (name, a, b) in cases {
        let want = mt::matmul(&a.astype(DType::F32)?, &b.astype(DType::F32)?)?;
        let got = mt::matmul(&a.to(g)?, &b.to(g)?)?;
        let (want, got) = (want.to_f64_vec()?, got.astype(DType::F32)?.to_f64_vec()?);
        let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        let err = want.iter().zip(&got).fold(0.0f64, |e, (w, g)| e.max((w - g).abs()));
        let rel = err / scale;
        // f16 output rounding alone is 2^-11 of a value; f16 accumulation over K=136 adds a
        // few more; an indexing error is O(1).
        let ok = rel < 4e-3 && got.iter().all(|v| v.is_finite());
        let kernel = mt::matmul_kernel_name(0, DType::F16, [m, n, k])?;
        println!("{{\"bench\": \"matmul_f16_check\", \"case\": \"{name}\", \"shape\": [{z}, {m}, {n}, {k}], \"kernel\": \"{kernel}\", \"max_abs_err\": {err:.5}, \"max_ref\": {scale:.3}, \"rel_err\": {rel:.2e}, \"ok\": {ok}}}");
    }
    Ok(())
}

fn rows(dev: &mpsrt_runtime::GpuDevice, r: usize) -> Result<()> {
    let p = Place::Gpu(0);
    let x = mt::randn(&[r, r], DType::F32, p)?;
    // 200 calls: ~0.1 ms ops timed over 10 calls carried the final synchronization's round trip
    // and the clock ramp (0.20 vs 0.13 ms for the row sum on an H100).
    let ms = time(200, dev, &|| mt::softmax(&x, -1))?;
    let gb = (2 * r * r * 4) as f64 / (ms * 1e-3) / 1e9;
    println!(
        "{{\"bench\": \"softmax_f32\", \"shape\": [{r}, {r}], \"ms\": {ms:.4}, \"gbps\": {gb:.1}}}"
    );
    let ms = time(200, dev, &|| mt::sum(&x, Some(&[-1]), false))?;
    let gb = (r * r * 4 + r * 4) as f64 / (ms * 1e-3) / 1e9;
    println!("{{\"bench\": \"sum_last_axis_f32\", \"shape\": [{r}, {r}], \"ms\": {ms:.4}, \"gbps\": {gb:.1}}}");
    Ok(())
}
