//! Benchmarks for matmul, softmax and row sums on GPU 0: one JSON object per line
//! (`{"bench", "shape", "ms", "tflops" | "gbps"}`), timed after warm-up with `synchronize()`.
//! Run: `cargo run --release -p mpsrt-tensor --example bench_ops_a`.
//!
//! The f16 GEMM row (`matmul_f16`) is timed in a fresh child process (`BENCH_ONLY=f16gemm`),
//! after 0.3 s of back-to-back calls: late in this long process — after the f32 GEMMs and
//! the f16 check's host round trips — NVIDIA's Vulkan driver has lowered the SM clock
//! (BENCHMARKS.md, "The SM clock falls ... a few seconds into a long mpsrt process"), and the
//! same kernel that `bench_coop_sweep` times at 184–188 TFLOP/s read 53.8 there (H200,
//! session 12 `final2/ops.jsonl`). The in-process timing is still printed
//! (`matmul_f16_same_process`, the old method: 3 warm-ups, 20 timed calls) with `process_s`,
//! the process's age when timing began, so the two can be compared in one run.

use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::time::Instant;

#[path = "support/gemm_ab.rs"]
mod gemm_ab;

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

/// Calls `f` back to back (a synchronization every 8 calls) for at least `secs`, so the GPU's
/// clock is up before timing: bursts of short synchronized calls with host gaps let the
/// driver lower it.
fn warm(secs: f64, dev: &mpsrt_runtime::GpuDevice, f: &dyn Fn() -> Result<Tensor>) -> Result<()> {
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        for _ in 0..8 {
            f()?;
        }
        dev.synchronize()?;
    }
    Ok(())
}

fn started() -> Instant {
    static T: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T.get_or_init(Instant::now)
}

fn main() -> Result<()> {
    started();
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
    // `BENCH_ONLY=gemm32`: the f32 tiled GEMM's planners/tunes A/B in one process (`GEMM_AB`).
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "gemm32") {
        return gemm_ab::run(&dev);
    }
    // `BENCH_ONLY=bert16`: BERT-base's f16 products at batch 8 (the kernel each one takes).
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "bert16") {
        return bert16(&dev);
    }
    // `BENCH_ONLY=f16gemm`: the f16 4096³ row alone (the child the full run spawns).
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "f16gemm") {
        let k = if quick { 256 } else { 4096 };
        return f16_gemm(&dev, k, "matmul_f16", 0.3);
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
        (&[1024, 768], &[768, 2304]),
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
    // The old method in this (long) process, for comparison with the fresh child below.
    f16_gemm(dev, k, "matmul_f16_same_process", 0.0)?;
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "f16") {
        return f16_gemm(dev, k, "matmul_f16_warmed", 0.3);
    }
    let exe =
        std::env::current_exe().map_err(|e| mt::Error::invalid("bench_ops_a", e.to_string()))?;
    let out = std::process::Command::new(exe)
        .env("BENCH_ONLY", "f16gemm")
        .output()
        .map_err(|e| mt::Error::invalid("bench_ops_a", e.to_string()))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

/// The f16 `[k, k]·[k, k]` product: `warm_s` of back-to-back calls (none: 3 warm-ups), then
/// 20 timed calls, as `bench/torch_reference.py ops` times torch's; `process_s` is this
/// process's age when the timing began (the driver lowers the clock a few seconds into a
/// bursty process).
fn f16_gemm(dev: &mpsrt_runtime::GpuDevice, k: usize, label: &str, warm_s: f64) -> Result<()> {
    let p = Place::Gpu(0);
    let a = mt::randn(&[k, k], DType::F32, p)?.astype(DType::F16)?;
    let b = mt::randn(&[k, k], DType::F32, p)?.astype(DType::F16)?;
    let f = || mt::matmul(&a, &b);
    warm(warm_s, dev, &f)?;
    let age = started().elapsed().as_secs_f64();
    let ms = time(20, dev, &f)?;
    let tf = 2.0 * (k as f64).powi(3) / (ms * 1e-3) / 1e12;
    let kernel = mt::matmul_kernel_name(0, DType::F16, [k, k, k])?;
    println!("{{\"bench\": \"{label}\", \"shape\": [{k}, {k}, {k}], \"ms\": {ms:.4}, \"tflops\": {tf:.3}, \"kernel\": \"{kernel}\", \"warm_s\": {warm_s}, \"process_s\": {age:.2}}}");
    Ok(())
}

/// BERT-base's f16 products at batch 8 (M = 1024 tokens): merged Q/K/V, attention output,
/// FFN up and down, and the per-head attention products (96 heads × 128 × 128 × 64); 0.2 s
/// warm, then 200 timed calls each, with the kernel each takes.
fn bert16(dev: &mpsrt_runtime::GpuDevice) -> Result<()> {
    let p = Place::Gpu(0);
    let shapes: &[(&str, &[usize], &[usize])] = &[
        ("qkv", &[1024, 768], &[768, 2304]),
        ("attn_out", &[1024, 768], &[768, 768]),
        ("ffn_up", &[1024, 768], &[768, 3072]),
        ("ffn_down", &[1024, 3072], &[3072, 768]),
        ("scores", &[8, 12, 128, 64], &[8, 12, 64, 128]),
        ("context", &[8, 12, 128, 128], &[8, 12, 128, 64]),
    ];
    for &(name, sa, sb) in shapes {
        let a = mt::randn(sa, DType::F32, p)?.astype(DType::F16)?;
        let b = mt::randn(sb, DType::F32, p)?.astype(DType::F16)?;
        let f = || mt::matmul(&a, &b);
        warm(0.2, dev, &f)?;
        let ms = time(200, dev, &f)?;
        let r = sa.len();
        let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        let z: usize = sa[..r - 2].iter().product();
        let tf = 2.0 * (z * m * n * k) as f64 / (ms * 1e-3) / 1e12;
        let kernel = mt::matmul_kernel_name(0, DType::F16, [m, n, k])?;
        println!("{{\"bench\": \"matmul_f16_bert\", \"name\": \"{name}\", \"a\": {sa:?}, \"b\": {sb:?}, \"ms\": {ms:.4}, \"tflops\": {tf:.3}, \"kernel\": \"{kernel}\"}}");
    }
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
    gemm_epilogue_check()
}

/// f16 `gemm` with a bias row (C `[N]`, beta 0.5), alpha 2 and each activation the epilogue
/// takes (none, Relu, Clip, Silu) on the GPU against the f32 CPU `gemm_act` of the same values:
/// the cooperative kernel's epilogue with `MPSRT_COOP_EPILOGUE=1` (edge blocks at 200×264×136,
/// whole blocks at 256×512×320), the tiled GEMM's otherwise.
fn gemm_epilogue_check() -> Result<()> {
    let g = Place::Gpu(0);
    let h = |shape: &[usize]| -> Result<Tensor> {
        mt::randn(shape, DType::F32, Place::Cpu)?.astype(DType::F16)
    };
    let acts = [
        ("none", None),
        ("relu", Some(mt::Activation::Relu)),
        ("clip", Some(mt::Activation::Clip(-1.0, 2.0))),
        ("silu", Some(mt::Activation::Silu)),
    ];
    for (m, n, k) in [(200usize, 264usize, 136usize), (256, 512, 320)] {
        let (a, b) = (h(&[m, k])?, h(&[k, n])?);
        let c = mt::randn(&[n], DType::F32, Place::Cpu)?;
        for (name, act) in acts {
            let (a32, b32) = (a.astype(DType::F32)?, b.astype(DType::F32)?);
            let want = mt::gemm_act(&a32, &b32, Some(&c), 2.0, 0.5, false, false, act)?;
            let got =
                mt::gemm_act(&a.to(g)?, &b.to(g)?, Some(&c.to(g)?), 2.0, 0.5, false, false, act)?;
            let (want, got) = (want.to_f64_vec()?, got.astype(DType::F32)?.to_f64_vec()?);
            let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            let err = want.iter().zip(&got).fold(0.0f64, |e, (w, g)| e.max((w - g).abs()));
            let rel = err / scale;
            let ok = rel < 4e-3 && got.iter().all(|v| v.is_finite()) && got.len() == want.len();
            println!("{{\"bench\": \"gemm_f16_epilogue_check\", \"act\": \"{name}\", \"shape\": [{m}, {n}, {k}], \"MPSRT_COOP_EPILOGUE\": \"{}\", \"max_abs_err\": {err:.5}, \"max_ref\": {scale:.3}, \"rel_err\": {rel:.2e}, \"ok\": {ok}}}", std::env::var("MPSRT_COOP_EPILOGUE").unwrap_or_default());
        }
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
