//! `mpsrt bench ...`: micro-benchmarks whose numbers go into BENCHMARKS.md.

use indicatif::{ProgressBar, ProgressStyle};
use mpsrt::{device, DType, Place, Tensor};
use std::time::Instant;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// f32 add bandwidth on a large tensor and the eager overhead of tiny ops.
    Elementwise(ElementwiseArgs),
}

#[derive(clap::Args)]
pub struct ElementwiseArgs {
    /// Elements per operand for the bandwidth test; default 64M, or fewer where the adapter's
    /// storage binding or memory limit holds less (128 MiB on lavapipe: 32M).
    #[arg(long)]
    size: Option<usize>,
    /// Timed iterations of the large add.
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Tiny (16-element) ops issued back to back for the overhead test.
    #[arg(long, default_value_t = 1000)]
    tiny_ops: usize,
    /// Place to run on (cpu, mps, mps:N); default: first GPU.
    #[arg(long)]
    place: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn sync(place: Place) -> mpsrt::Result<()> {
    if let Place::Gpu(i) = place {
        device::gpu_device(i)?.synchronize()?;
    }
    Ok(())
}

fn bar(n: usize, msg: &'static str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(n as u64).with_message(msg);
    if let Ok(style) = ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} {elapsed}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

fn submit_timing(place: Place) -> mpsrt::Result<Option<mpsrt_runtime::SubmitTiming>> {
    Ok(match place {
        Place::Gpu(i) => Some(device::gpu_device(i)?.submit_timing()),
        Place::Cpu => None,
    })
}

fn delta(
    b: Option<mpsrt_runtime::SubmitTiming>,
    a: Option<mpsrt_runtime::SubmitTiming>,
) -> Option<mpsrt_runtime::SubmitTiming> {
    let (b, a) = (b?, a?);
    Some(b.since(&a))
}

fn timing_json(t: Option<mpsrt_runtime::SubmitTiming>) -> Option<serde_json::Value> {
    t.map(|t| {
        serde_json::json!({"submits": t.submits, "dispatches": t.dispatches,
            "submit_us": t.submit_ns / 1000, "poll_us": t.poll_ns / 1000,
            "backpressure_us": t.backpressure_ns / 1000, "sync_us": t.sync_ns / 1000})
    })
}

fn bind_cache_stats(place: Place) -> mpsrt::Result<Option<mpsrt_runtime::BindCacheStats>> {
    Ok(match place {
        Place::Gpu(i) => Some(device::gpu_device(i)?.bind_cache_stats()),
        Place::Cpu => None,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// 64M f32 elements, or as many as one storage binding holds (larger operands would be
/// windowed: several dispatches, no longer one kernel's bandwidth) and a quarter of the
/// memory limit fits three times (two operands and the result, plus the result in flight).
fn default_size(place: Place) -> mpsrt::Result<usize> {
    let mut n = 64usize << 20;
    if let Place::Gpu(i) = place {
        let dev = device::gpu_device(i)?;
        let bind = dev.properties().max_storage_buffer_binding_size / 4;
        let mem = dev.memory_stats().limit / 4 / 4 / 4;
        n = n.min(bind as usize).min(mem as usize);
    }
    // A multiple of 1M keeps the vec4 path and round numbers.
    Ok((n >> 20 << 20).max(1 << 20))
}

pub fn run(cmd: BenchCommand) -> mpsrt::Result<()> {
    let BenchCommand::Elementwise(a) = cmd;
    let place = match &a.place {
        Some(p) => device::validate_place(p.parse()?)?,
        None if device::gpu_available() => Place::Gpu(0),
        None => Place::Cpu,
    };
    let name = match place {
        Place::Gpu(i) => device::gpu_device(i)?.properties().display_name(),
        Place::Cpu => "CPU reference backend".to_string(),
    };
    let size = match a.size {
        Some(n) => n,
        None => default_size(place)?,
    };
    // Bandwidth: c = a + b reads 2 and writes 1 f32 per element.
    let x = mpsrt::full(&[size], 1.0, DType::F32, place)?;
    let y = mpsrt::full(&[size], 2.0, DType::F32, place)?;
    for _ in 0..3 {
        mpsrt::add(&x, &y)?;
    }
    sync(place)?;
    let pb = bar(a.iters, "add", a.json);
    let timing0 = submit_timing(place)?;
    let t0 = Instant::now();
    let mut last: Option<Tensor> = None;
    for _ in 0..a.iters {
        last = Some(mpsrt::add(&x, &y)?);
        pb.inc(1);
    }
    sync(place)?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    if let Some(t) = last {
        let probe = t.slice(0, Some(0), Some(4), 1)?.to_vec::<f32>()?;
        if probe.iter().any(|&v| v != 3.0) {
            return Err(mpsrt::Error::device("bench", format!("wrong result {probe:?}")));
        }
    }
    let timing = delta(submit_timing(place)?, timing0);
    let bytes = 3.0 * 4.0 * size as f64 * a.iters as f64;
    let gbps = bytes / secs / 1e9;
    // Eager overhead: many tiny ops recorded back to back, then one synchronize.
    let s = mpsrt::full(&[16], 1.0, DType::F32, place)?;
    let mut per_op = Vec::new();
    // Host time to record the ops (before the final synchronize): when it is close to the
    // per-op total, the host is the bound, not the GPU.
    let mut record = Vec::new();
    let pb = bar(5, "tiny ops", a.json);
    let tiny_timing0 = submit_timing(place)?;
    let binds0 = bind_cache_stats(place)?;
    for _ in 0..5 {
        sync(place)?;
        let t0 = Instant::now();
        for _ in 0..a.tiny_ops {
            mpsrt::add(&s, &s)?;
        }
        record.push(t0.elapsed().as_secs_f64() * 1e6 / a.tiny_ops as f64);
        sync(place)?;
        per_op.push(t0.elapsed().as_secs_f64() * 1e6 / a.tiny_ops as f64);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let tiny_timing = delta(submit_timing(place)?, tiny_timing0);
    // Bind groups created vs reused over the tiny ops: a miss per op means the cache is not
    // doing its job (e.g. the allocator stopped handing the same buffers back).
    let binds = bind_cache_stats(place)?.zip(binds0).map(|(b, b0)| {
        serde_json::json!({"hits": b.hits - b0.hits, "misses": b.misses - b0.misses, "entries": b.entries})
    });
    let us = median(per_op);
    let record_us = median(record);
    if a.json {
        println!(
            "{}",
            serde_json::json!({"device": name, "place": place.to_string(), "add_elements": size, "add_iters": a.iters,
                "add_gbps": gbps, "add_ms": secs * 1e3 / a.iters as f64, "tiny_ops": a.tiny_ops, "tiny_op_us": us,
                "tiny_op_record_us": record_us, "tiny_bind_cache": binds,
                "tiny_submit_timing": timing_json(tiny_timing),
                "add_submit_timing": timing_json(timing)})
        );
    } else {
        println!("device: {name}");
        println!(
            "f32 add, {} elements: {:.3} ms/op, {gbps:.1} GB/s (3 x 4 bytes/element)",
            size,
            secs * 1e3 / a.iters as f64
        );
        println!(
            "eager overhead: {us:.2} us/op ({} 16-element adds then synchronize, median of 5; \
             {record_us:.2} us/op to record them before the synchronize)",
            a.tiny_ops
        );
    }
    Ok(())
}
