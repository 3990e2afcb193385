//! Probe: the GEMMs ResNet-50's convs lower to at batch 32, on GPU 0. For each shape it times
//! the batched form (`[1, M, K] @ [N, K, P]`, weights broadcast), the merged form (`[M, K] @
//! [K, N·P]`, what a merged conv runs), the merged form with B's rows padded by 64 floats (is
//! the row stride to blame?) and the merged form with B stored transposed (loads along K).
//! Each variant runs `--rounds` times (default 3) so run-to-run spread shows; each timing is
//! `--iters` calls, each synchronized, minus nothing (the first line is the synchronization
//! floor: a 1-element add). One JSON object per line.
//! Run: `cargo run --release -p mpsrt-tensor --example bench_gemm_shapes [-- --rounds 3]`.

use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::time::Instant;

fn arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok())
}

fn time(
    dev: &mpsrt_runtime::GpuDevice,
    iters: usize,
    f: &dyn Fn() -> Result<Tensor>,
) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
        dev.synchronize()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn main() -> Result<()> {
    let rounds = arg("--rounds").unwrap_or(3);
    let iters = arg("--iters").unwrap_or(20);
    let p = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    let one = mt::ones(&[1], DType::F32, p)?;
    let ms = time(&dev, iters, &|| mt::add(&one, &one))?;
    println!("{{\"bench\": \"sync_floor\", \"ms\": {ms:.4}}}");
    let big = mt::randn(&[4096, 4096], DType::F32, p)?;
    let ms = time(&dev, 5, &|| mt::matmul(&big, &big))?;
    println!(
        "{{\"bench\": \"square4096\", \"ms\": {ms:.4}, \"tflops\": {:.2}}}",
        2.0 * 4096f64.powi(3) / ms / 1e9
    );
    // (batch, M, K, P): ResNet-50 convs at batch 32 (1×1 and 3×3 as im2col products).
    let shapes = [
        (32, 64, 256, 3136),
        (32, 64, 576, 3136),
        (32, 128, 1152, 784),
        (32, 128, 512, 784),
        (32, 256, 2304, 196),
        (32, 512, 4608, 49),
    ];
    for round in 0..rounds {
        for (n, m, k, pp) in shapes {
            let flops = 2.0 * (n * m * k * pp) as f64;
            let cols = n * pp;
            let w = mt::randn(&[1, m, k], DType::F32, p)?;
            let col = mt::randn(&[n, k, pp], DType::F32, p)?;
            let w2 = mt::randn(&[m, k], DType::F32, p)?;
            let col2 = mt::randn(&[k, cols], DType::F32, p)?;
            let padded = mt::randn(&[k, cols + 64], DType::F32, p)?;
            let padded = padded.slice(1, Some(0), Some(cols as isize), 1)?;
            let col_t = mt::randn(&[cols, k], DType::F32, p)?;
            let col_t = col_t.transpose(0, 1)?;
            let variants: [(&str, &dyn Fn() -> Result<Tensor>); 4] = [
                ("batched", &|| mt::matmul(&w, &col)),
                ("merged", &|| mt::matmul(&w2, &col2)),
                ("merged_padded", &|| mt::matmul(&w2, &padded)),
                ("merged_bt", &|| mt::matmul(&w2, &col_t)),
            ];
            for (name, f) in variants {
                let ms = time(&dev, iters, f)?;
                println!("{{\"bench\": \"{name}\", \"round\": {round}, \"n\": {n}, \"m\": {m}, \"k\": {k}, \"p\": {pp}, \"ms\": {ms:.4}, \"tflops\": {:.2}}}", flops / ms / 1e9);
            }
        }
    }
    Ok(())
}
