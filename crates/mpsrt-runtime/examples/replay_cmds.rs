//! Host cost of one plan replay, without a model (issue 22): a recording of `N` chained dispatches
//! of a small kernel (two read buffers, one written, a metadata uniform; DenseNet's shape) is
//! replayed and submitted `ITERS` times, waiting for the GPU after each. Prints the p50 host time
//! per command of the replay and of its submits, for profiling wgpu-core's `finish` and the driver
//! (`perf record`) on any adapter.
//!
//! `cargo run --release -p mpsrt-runtime --example replay_cmds -- [N] [ITERS]`

use mpsrt_runtime::{gpu_device, Binding, Kernel};
use std::time::Instant;

const SRC: &str = r#"
struct Meta { n: u32, scale: f32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> m: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if g.x < m.n { y[g.x] = a[g.x] * m.scale + b[g.x]; }
}
"#;

fn main() -> mpsrt_core::Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(300);
    let iters = args.get(1).copied().unwrap_or(200);
    let d = gpu_device(0)?;
    let pipeline = d.pipeline(Kernel { source: SRC, entry: "main" })?;
    let len = 1024usize;
    let bufs: Vec<std::sync::Arc<mpsrt_runtime::GpuBuffer>> = (0..8)
        .map(|i| d.upload("replay_cmds", &vec![i as u8; len * 4]).map(std::sync::Arc::new))
        .collect::<Result<_, _>>()?;
    // One run eagerly (compiles and binds), then the captured one.
    let run = |d: &mpsrt_runtime::GpuDevice| -> mpsrt_core::Result<()> {
        for i in 0..n {
            let (a, b, y) = (&bufs[i % 8], &bufs[(i + 3) % 8], &bufs[(i + 5) % 8]);
            let mut meta = (len as u32).to_le_bytes().to_vec();
            meta.extend_from_slice(&(1.0f32 + i as f32 * 1e-3).to_le_bytes());
            meta.extend_from_slice(&[0u8; 8]);
            d.dispatch(
                "replay_cmds",
                &pipeline,
                &[Binding::from(&**a), Binding::from(&**b), Binding::from(&**y)],
                &meta,
                [(len as u32).div_ceil(64), 1, 1],
            )?;
        }
        Ok(())
    };
    run(&d)?;
    d.synchronize()?;
    d.begin_capture()?;
    run(&d)?;
    // The recording holds the buffers it did not allocate itself.
    let rec = d.end_capture(bufs.clone());
    let rec = match rec {
        Ok(r) => r,
        Err(e) => {
            eprintln!("capture refused: {e}");
            return Ok(());
        }
    };
    d.synchronize()?;
    let mut host = Vec::with_capacity(iters);
    let mut finish = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = d.submit_timing();
        let t = Instant::now();
        d.replay(&rec)?;
        d.flush()?;
        host.push(t.elapsed().as_secs_f64() * 1e6);
        finish.push(d.submit_timing().since(&t0).finish_ns as f64 / 1e3);
        d.synchronize()?;
    }
    host.sort_by(f64::total_cmp);
    finish.sort_by(f64::total_cmp);
    let (h, f) = (host[iters / 2], finish[iters / 2]);
    println!(
        "{{\"commands\": {}, \"host_us_p50\": {h:.1}, \"host_us_per_command\": {:.3}, \"finish_us_per_command\": {:.3}}}",
        rec.commands(),
        h / rec.commands().max(1) as f64,
        f / rec.commands().max(1) as f64
    );
    Ok(())
}
