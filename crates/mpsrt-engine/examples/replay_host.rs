//! Host time of a GPU `Session::run` with plan replay on and off, in one process, for issue 22:
//! `record` is the time `run` takes before anything waits for the device, `+submit` adds the
//! `flush` that hands the last commands to the driver (where wgpu-core encodes the pass), so
//! both modes pay for every command they record; `waits` is the part of `record` the host spent
//! blocked on the device (backpressure, reads: `SubmitTiming`), and `host only` is `+submit`
//! less `waits` — on lavapipe, where the device is the same two cores, a run can block on it
//! mid-way. The device is synchronized between runs.
//!
//! `cargo run --release -p mpsrt-engine --example replay_host -- MODEL.onnx [ITERATIONS] [replay]`
//! (inputs: the model's shapes with dynamic dims as 1, zeros for integers, random floats).
//! `chain:N` instead of a model file times a synthetic plan of N tiny unfused steps.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use std::collections::HashMap;
use std::time::Instant;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `chain:N`: N unfused elementwise steps on 64 floats (x + y, |.|, alternating), so the GPU
/// work is negligible and a run's time is the host's (a quick measure on a loaded lavapipe).
fn chain(n: usize) -> mpsrt_graph::Graph {
    use mpsrt_graph::{BinaryOp, Dim, Graph, Op, UnaryOp};
    let mut g = Graph::new();
    let x = g.add_input("x", DType::F32, vec![Dim::Known(64)]).expect("input");
    let y = g.add_input("y", DType::F32, vec![Dim::Known(64)]).expect("input");
    let mut v = x;
    for i in 0..n {
        let out = g.add_value(format!("v{i}"), DType::F32, None).expect("value");
        let (op, ins) = if i % 2 == 0 {
            (Op::Binary(BinaryOp::Add), vec![v, y])
        } else {
            (Op::Unary(UnaryOp::Abs), vec![v])
        };
        g.add_node(format!("n{i}"), op, ins, vec![out]);
        v = out;
    }
    g.outputs = vec![v];
    g
}

fn main() -> mpsrt_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: replay_host MODEL.onnx|chain:N [ITERATIONS] [replay]");
    let unfused = SessionOptions { fusion: false, ..SessionOptions::default() };
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let place = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    // A third argument `replay` skips the step-by-step mode (for profiling the replay alone).
    let modes: &[bool] =
        if args.get(3).is_some_and(|m| m == "replay") { &[true] } else { &[false, true] };
    for &replay in modes {
        let s = match path.strip_prefix("chain:") {
            Some(n) => Session::from_graph(chain(n.parse().unwrap_or(400)), place, unfused)?,
            None => Session::load(path, place, SessionOptions::default())?,
        }
        .with_replay(replay);
        let mut feeds = HashMap::new();
        let mut shapes = Vec::new();
        for i in s.inputs() {
            let shape: Vec<usize> = i.shape.iter().map(|d| d.known().unwrap_or(1)).collect();
            let t = if i.dtype.is_float() {
                mpsrt_tensor::rand(&shape, DType::F32, Place::Cpu)?.astype(i.dtype)?
            } else {
                mpsrt_tensor::zeros(&shape, i.dtype, Place::Cpu)?
            };
            let t = if i.dtype.gpu_supported() { t.to(place)? } else { t };
            shapes.push(shape);
            feeds.insert(i.name.clone(), t);
        }
        let steps = s.plan_for(&shapes)?.steps.len();
        // The first run uploads constants and compiles pipelines; the second is captured.
        for _ in 0..2 {
            drop(s.run(&feeds)?);
            s.synchronize()?;
        }
        let (mut rec, mut sub, mut waits, mut host) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iters {
            let t = dev.submit_timing();
            let (d0, w0) = (t.dispatches, t.backpressure_ns + t.sync_ns);
            let t0 = Instant::now();
            let outs = s.run(&feeds)?;
            let t1 = Instant::now();
            dev.flush()?;
            let t2 = Instant::now();
            let t = dev.submit_timing();
            let w = (t.backpressure_ns + t.sync_ns - w0) as f64 / 1e6;
            waits.push(w);
            host.push((t2 - t0).as_secs_f64() * 1e3 - w);
            rec.push((t1 - t0).as_secs_f64() * 1e3);
            sub.push((t2 - t0).as_secs_f64() * 1e3);
            s.synchronize()?;
            drop(outs);
            if rec.len() == 1 {
                println!("  dispatches per run: {}", dev.submit_timing().dispatches - d0);
            }
        }
        let (r, u, w, h) = (p50(rec), p50(sub), p50(waits), p50(host));
        let per = |ms: f64| ms * 1e3 / steps as f64;
        println!(
            "replay {replay:5}: {steps} steps, p50 ms: record {r:.3} ({:.1} us/step), \
             +submit {u:.3} ({:.1} us/step), waits {w:.3}, host only {h:.3} ({:.1} us/step); {}",
            per(r),
            per(u),
            per(h),
            s.replay_status(&shapes)?
        );
    }
    Ok(())
}
