//! Times conv2d on the distinct ResNet-50 conv shapes at batch 1 and 32 on GPU 0 (after a
//! warm-up, bracketed by `GpuDevice::synchronize()`), one JSON object per line:
//! `{"bench": "conv2d", "n", "c", "h", "k", "r", "stride", "ms", "tflops"}`.
//! Options: `--batch 1,32` (batch sizes), `--iters 20` (timed iterations per shape),
//! `--sync-each` (wait for every conv before the next: one conv's latency including the
//! submit/wait round trip; without it, back-to-back independent convs overlap on the GPU),
//! `--warm-s 1.0` (seconds of 2048³ matmuls before the first timing, so the GPU's clocks are up
//! before the first shape: without it the first process of a series read up to 3× slow),
//! `--shapes 4,10` (only these rows of the shape table, in this order), `--rounds 2` (the
//! whole list again: does a shape slow down later in a process?). Each line also gives the
//! allocator's reserved and cached MiB after the shape, and the round. `--densenet` adds
//! DenseNet-121's distinct conv shapes (its 3×3 128→32 layers, a few of its 1×1 widths and
//! transitions) after ResNet-50's. Each line names the conv algorithm asked for
//! (`MPSRT_CONV_ALGO`, default `auto`; `MPSRT_CONV_PLAN_LOG=1` prints each conv's plan).

use mpsrt_tensor::{conv2d, matmul, randn, Conv2dOptions, ConvPadding, DType, Place, Result};
use std::time::Instant;

/// (in channels, input size, out channels, kernel, stride) of every distinct ResNet-50 conv
/// (torchvision v1.5: the stride sits on the 3×3 conv; downsample is a strided 1×1).
const SHAPES: &[(usize, usize, usize, usize, usize)] = &[
    (3, 224, 64, 7, 2), // stem
    (64, 56, 64, 1, 1),
    (64, 56, 64, 3, 1),
    (64, 56, 256, 1, 1),
    (256, 56, 64, 1, 1),
    (256, 56, 128, 1, 1),
    (128, 56, 128, 3, 2),
    (128, 28, 512, 1, 1),
    (256, 56, 512, 1, 2), // downsample
    (512, 28, 128, 1, 1),
    (128, 28, 128, 3, 1),
    (512, 28, 256, 1, 1),
    (256, 28, 256, 3, 2),
    (256, 14, 1024, 1, 1),
    (512, 28, 1024, 1, 2), // downsample
    (1024, 14, 256, 1, 1),
    (256, 14, 256, 3, 1),
    (1024, 14, 512, 1, 1),
    (512, 14, 512, 3, 2),
    (512, 7, 2048, 1, 1),
    (1024, 14, 2048, 1, 2), // downsample
    (2048, 7, 512, 1, 1),
    (512, 7, 512, 3, 1),
];

/// DenseNet-121 shapes (growth 32, bottleneck 128): its 3×3 layers on every map, 1×1
/// bottlenecks at a few input widths, and the transitions.
const DENSENET: &[(usize, usize, usize, usize, usize)] = &[
    (128, 56, 32, 3, 1),
    (128, 28, 32, 3, 1),
    (128, 14, 32, 3, 1),
    (128, 7, 32, 3, 1),
    (256, 56, 128, 1, 1),
    (512, 28, 128, 1, 1),
    (1024, 14, 128, 1, 1),
    (992, 7, 128, 1, 1),
    (512, 28, 256, 1, 1),
    (1024, 14, 512, 1, 1),
];

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result<()> {
    let batches: Vec<usize> = arg("--batch")
        .unwrap_or_else(|| "1,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let iters: usize = arg("--iters").and_then(|s| s.parse().ok()).unwrap_or(20).max(1);
    let sync_each = std::env::args().any(|a| a == "--sync-each");
    let warm_s: f64 = arg("--warm-s").and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let rounds: usize = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut table = SHAPES.to_vec();
    if std::env::args().any(|a| a == "--densenet") {
        table.extend_from_slice(DENSENET);
    }
    let picked: Vec<(usize, usize, usize, usize, usize)> = match arg("--shapes") {
        Some(list) => list
            .split(',')
            .filter_map(|i| table.get(i.trim().parse::<usize>().ok()?).copied())
            .collect(),
        None => table,
    };
    let algo = std::env::var("MPSRT_CONV_ALGO").unwrap_or_else(|_| "auto".into());
    let place = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    let a = randn(&[2048, 2048], DType::F32, place)?;
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < warm_s {
        for _ in 0..8 {
            matmul(&a, &a)?;
        }
        dev.synchronize()?;
    }
    drop(a);
    for round in 0..rounds {
        for &n in &batches {
            for &(c, h, k, r, stride) in &picked {
                let x = randn(&[n, c, h, h], DType::F32, place)?;
                let w = randn(&[k, c, r, r], DType::F32, place)?;
                let o = Conv2dOptions {
                    stride: [stride, stride],
                    padding: ConvPadding::symmetric(r / 2, r / 2),
                    ..Default::default()
                };
                for _ in 0..3 {
                    conv2d(&x, &w, None, &o)?;
                }
                dev.synchronize()?;
                let t0 = Instant::now();
                let mut oh = 0;
                for _ in 0..iters {
                    let y = conv2d(&x, &w, None, &o)?;
                    oh = y.shape()[2];
                    if sync_each {
                        dev.synchronize()?;
                    }
                }
                dev.synchronize()?;
                let ms = t0.elapsed().as_secs_f64() * 1e3 / iters as f64;
                let flops = 2.0 * (n * k * oh * oh * c * r * r) as f64;
                let tflops = flops / (ms * 1e-3) / 1e12;
                let mem = dev.memory_stats();
                let mib = |b: u64| b >> 20;
                println!(
                "{{\"bench\": \"conv2d\", \"algo\": \"{algo}\", \"n\": {n}, \"c\": {c}, \"h\": {h}, \"k\": {k}, \"r\": {r}, \"stride\": {stride}, \"sync_each\": {sync_each}, \"ms\": {ms:.4}, \"tflops\": {tflops:.4}, \"round\": {round}, \"reserved_mib\": {}, \"cached_mib\": {}}}",
                mib(mem.reserved),
                mib(mem.cached)
            );
            }
        }
    }
    Ok(())
}
