//! Probe: the batched GEMM a batch-N conv lowers to (`[1, M, K] @ [N, K, P]`, weights broadcast)
//! against the same FLOPs as one GEMM (`[M, K] @ [K, N·P]`), on GPU 0, each call synchronized;
//! the first line is the synchronization floor (a 1-element add). One JSON object per line.
//! Run: `cargo run --release -p mpsrt-tensor --example bench_gemm_shapes`.

use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::time::Instant;

fn time(dev: &mpsrt_runtime::GpuDevice, f: &dyn Fn() -> Result<Tensor>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let iters = 20;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
        dev.synchronize()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn main() -> Result<()> {
    let p = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    let one = mt::ones(&[1], DType::F32, p)?;
    let ms = time(&dev, &|| mt::add(&one, &one))?;
    println!("{{\"bench\": \"sync_floor\", \"ms\": {ms:.4}}}");
    // (batch, M, K, P): ResNet-50 convs at batch 32 (1×1 and 3×3 as im2col products).
    for (n, m, k, pp) in
        [(32, 64, 256, 3136), (32, 128, 1152, 784), (32, 512, 4608, 49), (8, 64, 256, 3136)]
    {
        let w = mt::randn(&[1, m, k], DType::F32, p)?;
        let col = mt::randn(&[n, k, pp], DType::F32, p)?;
        let flops = 2.0 * (n * m * k * pp) as f64;
        let ms = time(&dev, &|| mt::matmul(&w, &col))?;
        println!("{{\"bench\": \"batched\", \"n\": {n}, \"m\": {m}, \"k\": {k}, \"p\": {pp}, \"ms\": {ms:.4}, \"tflops\": {:.2}}}", flops / ms / 1e9);
        let w2 = mt::randn(&[m, k], DType::F32, p)?;
        let col2 = mt::randn(&[k, n * pp], DType::F32, p)?;
        let ms = time(&dev, &|| mt::matmul(&w2, &col2))?;
        println!("{{\"bench\": \"single\", \"n\": {n}, \"m\": {m}, \"k\": {k}, \"p\": {pp}, \"ms\": {ms:.4}, \"tflops\": {:.2}}}", flops / ms / 1e9);
    }
    Ok(())
}
