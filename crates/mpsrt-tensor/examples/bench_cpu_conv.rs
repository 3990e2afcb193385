//! Probe: the CPU fast path on the conv shapes that dominate light_densenet121 and
//! light_resnet50 at batch 1 (one (C, H, W, OC, k, stride, pad) per line), plus the f32
//! per-channel `relu(x·s + t)` DenseNet applies before every 1×1 conv. Prints ms per call (best
//! of `--rounds` rounds of `--iters` calls) and GFLOP/s, one JSON object per line.
//! Run: `cargo run --release -p mpsrt-tensor --example bench_cpu_conv [-- --iters 20]`.

use mpsrt_tensor::{self as mt, BinaryFn, Conv2dOptions, ConvPadding, DType, Expr, Place};
use mpsrt_tensor::{Result, Tensor, UnaryFn};
use std::time::Instant;

fn arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok())
}

fn best(rounds: usize, iters: usize, f: &dyn Fn() -> Result<Tensor>) -> Result<f64> {
    f()?;
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e3 / iters as f64);
    }
    Ok(best)
}

fn main() -> Result<()> {
    let (rounds, iters) = (arg("--rounds").unwrap_or(3), arg("--iters").unwrap_or(20));
    let p = Place::Cpu;
    // (c, h, w, oc, k, stride, pad, label)
    let shapes = [
        (128, 56, 56, 32, 3, 1, 1, "dn_3x3_s1"),
        (128, 28, 28, 32, 3, 1, 1, "dn_3x3_s2"),
        (128, 14, 14, 32, 3, 1, 1, "dn_3x3_s3"),
        (128, 7, 7, 32, 3, 1, 1, "dn_3x3_s4"),
        (160, 56, 56, 128, 1, 1, 0, "dn_1x1_s1"),
        (320, 28, 28, 128, 1, 1, 0, "dn_1x1_s2"),
        (640, 14, 14, 128, 1, 1, 0, "dn_1x1_s3"),
        (768, 7, 7, 128, 1, 1, 0, "dn_1x1_s4"),
        (3, 224, 224, 64, 7, 2, 3, "conv1_7x7"),
        (64, 56, 56, 64, 3, 1, 1, "rn_3x3_s1"),
        (256, 56, 56, 64, 1, 1, 0, "rn_1x1_s1"),
        (128, 28, 28, 128, 3, 1, 1, "rn_3x3_s2"),
        (256, 14, 14, 256, 3, 1, 1, "rn_3x3_s3"),
        (1024, 14, 14, 256, 1, 1, 0, "rn_1x1_s3"),
        (512, 7, 7, 512, 3, 1, 1, "rn_3x3_s4"),
        (2048, 7, 7, 512, 1, 1, 0, "rn_1x1_s4"),
        (512, 7, 7, 2048, 1, 1, 0, "rn_1x1_s4_up"),
    ];
    // `--only LABEL` runs one shape (to profile it).
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1).cloned());
    for (c, h, w, oc, k, s, pad, label) in shapes {
        if only.as_deref().is_some_and(|o| o != label) {
            continue;
        }
        let x = mt::randn(&[1, c, h, w], DType::F32, p)?;
        let wt = mt::randn(&[oc, c, k, k], DType::F32, p)?;
        let b = mt::randn(&[oc], DType::F32, p)?;
        let opts = Conv2dOptions {
            stride: [s, s],
            padding: ConvPadding::Explicit([pad; 4]),
            ..Default::default()
        };
        let ms = best(rounds, iters, &|| mt::conv2d(&x, &wt, Some(&b), &opts))?;
        let (oh, ow) = ((h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1);
        let flops = 2.0 * (oc * c * k * k * oh * ow) as f64;
        println!(
            "{{\"bench\": \"{label}\", \"ms\": {ms:.4}, \"gflops\": {:.1}}}",
            flops / ms / 1e6
        );
    }
    for (c, hw, label) in [
        (256, 56, "affine_relu_s1"),
        (512, 28, "affine_relu_s2"),
        (992, 7, "affine_relu_s4"),
        (8, 7, "affine_relu_tiny"),
    ] {
        if only.as_deref().is_some_and(|o| o != label) {
            continue;
        }
        let x = mt::randn(&[1, c, hw, hw], DType::F32, p)?;
        let sc = mt::randn(&[c, 1, 1], DType::F32, p)?;
        let sh = mt::randn(&[c, 1, 1], DType::F32, p)?;
        let e = Expr::unary(
            UnaryFn::Relu,
            Expr::binary(
                BinaryFn::Add,
                Expr::binary(BinaryFn::Mul, Expr::input(0), Expr::input(1)),
                Expr::input(2),
            ),
        );
        let run = || mt::fused_elementwise("affine", &[&x, &sc, &sh], DType::F32, e.clone(), &[]);
        let ms = best(rounds, iters, &run)?;
        let gb = (2 * c * hw * hw * 4) as f64;
        println!("{{\"bench\": \"{label}\", \"ms\": {ms:.4}, \"gb_s\": {:.1}}}", gb / ms / 1e6);
    }
    Ok(())
}
