//! A model's concats written in place, squeeze-excitation gates folded into their convs and
//! depthwise convs computing their pool (issue 22) against the plain plan, on the GPU: runs
//! the model with the rewrites off and on (three runs each, the third replayed) on the same
//! inputs, prints the plan's statistics and whether the outputs are bit-identical — the SE
//! gate fusion and the depthwise pool sum in another order, so EfficientNet's differ by
//! rounding: the largest difference is printed, and the check fails (exit 1) past 1e-3 of the
//! largest output magnitude.
//!
//! `cargo run --release -p mpsrt-engine --example concat_check -- MODEL.onnx [BATCH]`
//! (inputs: the model's shapes with dynamic dims as BATCH (default 1), random floats).

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use std::collections::HashMap;

fn main() -> mpsrt_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: concat_check MODEL.onnx [BATCH]");
    let batch: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let place = Place::Gpu(0);
    let mut results = Vec::new();
    for on in [false, true] {
        let s = Session::load(path, place, SessionOptions::default())?
            .with_concat_inplace(on)
            .with_gate_fold(on)
            .with_dw_pool(on);
        let mut feeds = HashMap::new();
        let mut shapes = Vec::new();
        for (k, info) in s.inputs().iter().enumerate() {
            let shape: Vec<usize> =
                info.dims_i64().iter().map(|&d| if d < 0 { batch } else { d as usize }).collect();
            let n: usize = shape.iter().product();
            let t = match info.dtype {
                DType::F32 => {
                    let v: Vec<f32> =
                        (0..n).map(|i| ((i * 7 + k * 13) as f32 * 0.013).sin()).collect();
                    mpsrt_tensor::Tensor::from_slice(&v, &shape, place)?
                }
                d => mpsrt_tensor::zeros(&shape, d, place)?,
            };
            feeds.insert(info.name.clone(), t);
            shapes.push(shape);
        }
        let mut outs = Vec::new();
        let t0 = std::time::Instant::now();
        for _ in 0..3 {
            outs = s.run(&feeds)?;
        }
        let (absorbed, placed, copied) = s.concat_stats(&shapes)?;
        let (folded, affine, se, fallbacks) = s.gate_folds(&shapes)?;
        let (dw_pools, dw_fallbacks) = s.dw_pools(&shapes)?;
        println!(
            "rewrites={on}: {} concats as views, {} parts written in place, {} copied (2 runs \
             counted); {folded} gate Muls and {affine} BN+Relu folded ({fallbacks} fallbacks), {se} SE \
             gates fused; {dw_pools} depthwise convs with their pool ({dw_fallbacks} fallbacks); 3 runs \
             {:.1} ms, \
             replay {}",
            absorbed,
            placed,
            copied,
            t0.elapsed().as_secs_f64() * 1e3,
            s.replay_status(&shapes)?
        );
        let vals: Vec<Vec<f32>> = outs
            .iter()
            .map(|(_, t)| t.astype(DType::F32)?.to_vec::<f32>())
            .collect::<mpsrt_core::Result<_>>()?;
        results.push(vals);
    }
    let same = results[0] == results[1];
    let (mut diff, mut mag) = (0f32, 0f32);
    for (a, b) in results[0].iter().zip(&results[1]) {
        for (x, y) in a.iter().zip(b) {
            diff = diff.max((x - y).abs());
            mag = mag.max(x.abs());
        }
    }
    println!("outputs bit-identical: {same}; max abs difference {diff:e} (largest output {mag:e})");
    if diff > 1e-3 * mag.max(1e-6) {
        std::process::exit(1);
    }
    Ok(())
}
