//! `mpsrt run` and `mpsrt bench MODEL`: run an ONNX model through the engine from the shell.

use crate::npy;
use indicatif::{ProgressBar, ProgressStyle};
use mpsrt::{DType, Error, Place, Result, Tensor};
use mpsrt_engine::{Precision, Session, SessionOptions, StepProfile};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// Where to run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Device {
    Cpu,
    Gpu,
}

/// The place of `--device` (default: the first GPU when there is one).
pub(crate) fn place(d: Option<Device>) -> Place {
    match d {
        Some(Device::Cpu) => Place::Cpu,
        Some(Device::Gpu) => Place::Gpu(0),
        None if mpsrt::device::gpu_available() => Place::Gpu(0),
        None => Place::Cpu,
    }
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// The ONNX model.
    model: PathBuf,
    /// `name=file.npy` for one input, or a `.npz` whose array names are input names (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// Where to write the outputs (`.npz`).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Device (default: the GPU when there is one).
    #[arg(long, value_enum)]
    device: Option<Device>,
    /// `f16`: run a float32 model's heavy ops in float16 (sensitive ones stay f32; inputs and
    /// outputs keep their types).
    #[arg(long, default_value = "f32", value_parser = parse_precision)]
    precision: Precision,
}

/// `--precision`: `f32` or `f16` (the error names the option and the accepted values).
pub(crate) fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

fn load_inputs(specs: &[String], place: Place) -> Result<HashMap<String, Tensor>> {
    let mut feeds = HashMap::new();
    for spec in specs {
        let (name, file) = match spec.split_once('=') {
            Some((n, f)) => (Some(n.to_string()), PathBuf::from(f)),
            None => (None, PathBuf::from(spec)),
        };
        for (array_name, t) in npy::read(&file)? {
            let key = name.clone().or(array_name).ok_or_else(|| {
                Error::invalid("run", format!("--input {spec}: give it as NAME=FILE.npy"))
            })?;
            let t = if place.is_gpu() && t.dtype().gpu_supported() { t.to(place)? } else { t };
            if feeds.insert(key.clone(), t).is_some() {
                return Err(Error::invalid(
                    "run",
                    format!("input {key:?} is given twice (--input {spec} repeats it)"),
                ));
            }
        }
    }
    Ok(feeds)
}

fn summary(t: &Tensor) -> String {
    let vals = t.to(Place::Cpu).and_then(|c| c.to_f64_vec()).unwrap_or_default();
    let head: Vec<String> = vals.iter().take(6).map(|v| format!("{v:.5}")).collect();
    let more = if vals.len() > 6 { ", ..." } else { "" };
    format!("{} {:?} [{}{more}]", t.dtype(), t.shape(), head.join(", "))
}

/// Fails unless `path` can be written, before the model runs (a long run must not end in
/// "permission denied"). An existing file is opened for writing without truncating it; a new
/// one is created and removed again.
fn check_writable(path: &std::path::Path) -> Result<()> {
    let err = |e: std::io::Error| {
        Error::io("run", format!("--output {}: cannot write there: {e}", path.display()))
    };
    if path.is_dir() {
        return Err(Error::io("run", format!("--output {} is a directory", path.display())));
    }
    if path.exists() {
        std::fs::OpenOptions::new().append(true).open(path).map_err(err)?;
    } else {
        std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(err)?;
        std::fs::remove_file(path).map_err(err)?;
    }
    Ok(())
}

pub fn run(a: RunArgs) -> Result<()> {
    if let Some(path) = &a.output {
        check_writable(path)?;
    }
    let place = place(a.device);
    let session =
        Session::load_with_precision(&a.model, place, SessionOptions::default(), a.precision)?;
    let feeds = load_inputs(&a.inputs, place)?;
    let t0 = Instant::now();
    let outs = session.run(&feeds)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    println!("ran {} on {place} in {ms:.2} ms", a.model.display());
    for (name, t) in &outs {
        println!("  {name}: {}", summary(t));
    }
    if let Some(path) = &a.output {
        npy::write_npz(path, &outs)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ModelBenchArgs {
    /// Batch size substituted for dynamic (and leading) batch dims.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// The full shape of one input, `NAME=D0,D1,...` (repeatable): needed for inputs whose
    /// non-batch dims are dynamic (sequence lengths, image sizes); overrides `--batch` there.
    #[arg(long = "shape", value_name = "NAME=D0,D1,...", value_parser = parse_shape)]
    pub shapes: Vec<(String, Vec<usize>)>,
    /// Timed iterations.
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Untimed warm-up iterations.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// On a GPU, keep warming up for at least this many seconds: GPUs lower their clock while
    /// the host loads and plans a model, and a few runs do not bring it back.
    #[arg(long, default_value_t = 0.5)]
    pub warmup_s: f64,
    #[arg(long, value_enum)]
    pub device: Option<Device>,
    /// `f16`: run a float32 model's heavy ops in float16 (sensitive ones stay f32).
    #[arg(long, default_value = "f32", value_parser = parse_precision)]
    pub precision: Precision,
    /// Plan without elementwise fusion.
    #[arg(long)]
    pub no_fusion: bool,
    /// Plan without buffer reuse.
    #[arg(long)]
    pub no_memory_planning: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// After timing, run once more synchronizing after every step and report where the time
    /// goes (per op type, and the slowest steps).
    #[arg(long)]
    pub profile: bool,
    /// With `--profile`: run each step this many more times between two synchronizations and
    /// report the mean, so a step's own cost is not hidden behind one submit round trip.
    #[arg(long, default_value_t = 1)]
    pub profile_repeat: usize,
    /// Add `host_detail` to the JSON: the CPUs the thread ran on, its context switches, each
    /// iteration's host and wait times, and two probes of the core's speed (issue 22).
    #[arg(long)]
    pub host_detail: bool,
}

/// Per-op-type totals `(op, steps, ms)`, largest first, and the `n` slowest steps.
fn summarize(prof: &[StepProfile], n: usize) -> (Vec<(String, usize, f64)>, Vec<StepProfile>) {
    let mut by_op: HashMap<&str, (usize, f64)> = HashMap::new();
    for p in prof {
        let e = by_op.entry(&p.op).or_default();
        e.0 += 1;
        e.1 += p.ms;
    }
    let mut ops: Vec<(String, usize, f64)> =
        by_op.into_iter().map(|(k, (c, ms))| (k.to_string(), c, ms)).collect();
    ops.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut slow = prof.to_vec();
    slow.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    slow.truncate(n);
    (ops, slow)
}

/// A model input's dims as `N, seq, 4`.
fn dims_text(dims: &[impl std::fmt::Display]) -> String {
    dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

/// `NAME=D0,D1,...` of `--shape`.
fn parse_shape(s: &str) -> std::result::Result<(String, Vec<usize>), String> {
    let (name, dims) =
        s.rsplit_once('=').ok_or_else(|| format!("expected NAME=D0,D1,..., got '{s}'"))?;
    let dims = dims
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim().parse::<usize>().map_err(|e| format!("dim '{d}' of '{s}': {e}")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((name.to_string(), dims))
}

fn random_input(dtype: DType, shape: &[usize], place: Place) -> Result<Tensor> {
    let t = if dtype.is_float() {
        mpsrt::rand(shape, DType::F32, Place::Cpu)?.astype(dtype)?
    } else {
        mpsrt::zeros(shape, dtype, Place::Cpu)?
    };
    if place.is_gpu() && dtype.gpu_supported() {
        t.to(place)
    } else {
        Ok(t)
    }
}

fn sync(place: Place) -> Result<()> {
    if let Place::Gpu(i) = place {
        mpsrt::device::gpu_device(i)?.synchronize()?;
    }
    Ok(())
}

/// One run's host time split by the device's submission counters (microseconds): the replay's
/// record loop, its early submits, the other submits (the run's final one), of all submits the
/// parts in `CommandEncoder::finish` (wgpu-core's encoding) and `Queue::submit`, the poll and
/// backpressure after the final submit, and the rest (the engine: feeds, output buffers and
/// copies, plan lookup).
struct HostParts {
    total: f64,
    record: f64,
    early: f64,
    final_submit: f64,
    finish: f64,
    queue_submit: f64,
    poll: f64,
    rest: f64,
    submits: f64,
    early_submits: f64,
    dispatches: f64,
}

impl HostParts {
    fn of(total_us: f64, t: &mpsrt_runtime::SubmitTiming) -> HostParts {
        let us = |ns: u64| ns as f64 / 1e3;
        let record = us(t.replay_ns.saturating_sub(t.early_submit_ns));
        let early = us(t.early_submit_ns);
        let final_submit = us(t.submit_ns.saturating_sub(t.early_submit_ns));
        let poll = us(t.poll_ns + t.backpressure_ns + t.sync_ns);
        HostParts {
            total: total_us,
            record,
            early,
            final_submit,
            finish: us(t.finish_ns),
            queue_submit: us(t.queue_submit_ns),
            poll,
            rest: total_us - record - early - final_submit - poll,
            submits: t.submits as f64,
            early_submits: t.replay_early_submits as f64,
            dispatches: t.dispatches as f64,
        }
    }

    fn p50_json(parts: &[HostParts]) -> serde_json::Value {
        let p = |f: fn(&HostParts) -> f64| {
            let mut v: Vec<f64> = parts.iter().map(f).collect();
            v.sort_by(|x, y| x.total_cmp(y));
            (pct(&v, 0.5) * 100.0).round() / 100.0
        };
        serde_json::json!({
            "total": p(|h| h.total), "record_loop": p(|h| h.record),
            "early_submits": p(|h| h.early), "final_submit": p(|h| h.final_submit),
            "finish": p(|h| h.finish), "queue_submit": p(|h| h.queue_submit),
            "poll": p(|h| h.poll), "rest": p(|h| h.rest), "submits_n": p(|h| h.submits),
            "early_submits_n": p(|h| h.early_submits), "dispatches_n": p(|h| h.dispatches),
        })
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn bench(model: PathBuf, a: ModelBenchArgs) -> Result<()> {
    let place = place(a.device);
    let opts = SessionOptions { fusion: !a.no_fusion, memory_planning: !a.no_memory_planning };
    let session = Session::load_with_precision(&model, place, opts, a.precision)?;
    let mut feeds = HashMap::new();
    let mut shapes = Vec::new();
    for (name, _) in &a.shapes {
        if !session.inputs().iter().any(|i| &i.name == name) {
            let names: Vec<&str> = session.inputs().iter().map(|i| i.name.as_str()).collect();
            return Err(Error::invalid(
                "bench",
                format!("--shape names '{name}', which is not an input of the model (inputs: {names:?})"),
            ));
        }
    }
    for info in session.inputs() {
        let given = a.shapes.iter().rev().find(|(n, _)| n == &info.name).map(|(_, s)| s);
        let shape: Vec<usize> = match given {
            Some(s) => {
                let fits = s.len() == info.shape.len()
                    && s.iter().zip(&info.shape).all(|(&v, d)| d.known().is_none_or(|n| n == v));
                if !fits {
                    return Err(Error::invalid(
                        "bench",
                        format!(
                            "--shape {}={s:?} does not match the model's input [{}]",
                            info.name,
                            dims_text(&info.shape)
                        ),
                    ));
                }
                s.clone()
            }
            None => {
                let mut shape = Vec::with_capacity(info.shape.len());
                for (i, d) in info.shape.iter().enumerate() {
                    shape.push(match d.known() {
                        Some(n) if i == 0 && n == 1 => a.batch,
                        Some(n) => n,
                        None if i == 0 => a.batch,
                        None => {
                            return Err(Error::invalid(
                                "bench",
                                format!(
                                    "input '{}' has dynamic dim {i} (shape [{}]): give its \
                                     shape with --shape {}=D0,D1,...",
                                    info.name,
                                    dims_text(&info.shape),
                                    info.name
                                ),
                            ))
                        }
                    });
                }
                shape
            }
        };
        shapes.push(shape.clone());
        feeds.insert(info.name.clone(), random_input(info.dtype, &shape, place)?);
    }
    let plan = session.plan_for(&shapes)?;
    let warm_until = Instant::now()
        + std::time::Duration::from_secs_f64(if place.is_gpu() {
            a.warmup_s.max(0.0)
        } else {
            0.0
        });
    let mut warm = 0;
    while warm < a.warmup || Instant::now() < warm_until {
        session.run(&feeds)?;
        sync(place)?;
        warm += 1;
    }
    let pb = if a.json { ProgressBar::hidden() } else { ProgressBar::new(a.iterations as u64) };
    if let Ok(style) = ProgressStyle::with_template("{msg:>8} [{bar:30}] {pos}/{len} {elapsed}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message("run");
    let mut lat = Vec::with_capacity(a.iterations);
    // Host time to record (and submit) one run, before waiting for the device: when it is close
    // to the latency, the run is bound by the host, not by the GPU's kernels.
    let mut host = Vec::with_capacity(a.iterations);
    // Where each run's host time went (GPU places: the device's submission counters).
    let mut parts: Vec<HostParts> = Vec::with_capacity(a.iterations);
    let dev = match place {
        Place::Gpu(i) => Some(mpsrt::device::gpu_device(i)?),
        Place::Cpu => None,
    };
    let mut detail = a.host_detail.then(crate::host_cpu::HostDetail::start);
    let blocked0 = dev.as_ref().map_or(0, |d| d.submit_timing().sync_blocked);
    for _ in 0..a.iterations {
        let before = dev.as_ref().map(|d| d.submit_timing());
        let cpu0 = crate::host_cpu::current_cpu();
        let t0 = Instant::now();
        let outs = session.run(&feeds)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let cpu1 = crate::host_cpu::current_cpu();
        host.push(ms);
        if let (Some(d), Some(b)) = (&dev, before) {
            parts.push(HostParts::of(ms * 1e3, &d.submit_timing().since(&b)));
        }
        let tw = Instant::now();
        sync(place)?;
        let wait_us = tw.elapsed().as_secs_f64() * 1e6;
        drop(outs);
        lat.push(t0.elapsed().as_secs_f64() * 1e3);
        if let Some(d) = detail.as_mut() {
            d.iteration((cpu0, cpu1), ms * 1e3, wait_us);
        }
        pb.inc(1);
    }
    if let Some(d) = detail.as_mut() {
        d.finish();
    }
    pb.finish_and_clear();
    let prof = if a.profile { Some(session.profile(&feeds, a.profile_repeat)?) } else { None };
    // Which clock the profile's per-step times come from (GPU timestamps where the adapter
    // has them, otherwise only the synchronized wall time per step).
    let prof_mode = prof.as_ref().map(|p| {
        if !p.is_empty() && p.iter().all(|s| s.gpu_ms.is_some()) {
            "gpu-timestamps"
        } else {
            "sync-per-step"
        }
    });
    lat.sort_by(|x, y| x.total_cmp(y));
    let (p50, p90, p99) = (pct(&lat, 0.5), pct(&lat, 0.9), pct(&lat, 0.99));
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    host.sort_by(|x, y| x.total_cmp(y));
    let host_p50 = pct(&host, 0.5);
    if a.json {
        let mut v = serde_json::json!({
            "model": model.display().to_string(), "place": place.to_string(), "batch": a.batch,
            "iterations": a.iterations, "fusion": opts.fusion, "memory_planning": opts.memory_planning,
            "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "mean_ms": mean, "plan": plan.summary(),
            "host_record_p50_ms": host_p50, "precision": a.precision.name(),
            "host_record_us_per_step": host_p50 * 1e3 / plan.steps.len().max(1) as f64,
        });
        if !parts.is_empty() {
            v["host_parts_us_p50"] = HostParts::p50_json(&parts);
        }
        // Which replay path ran (`native (N barriers)`, `wgpu`, or why it is off).
        if let Ok(st) = session.replay_status(&shapes) {
            v["replay"] = st.into();
        }
        if let Some(d) = &detail {
            v["host_detail"] = d.json();
            if let Some(dev) = &dev {
                v["host_detail"]["sync_blocked"] =
                    (dev.submit_timing().sync_blocked - blocked0).into();
            }
            if let Some(h) = mpsrt_runtime::hugepages_pass() {
                v["host_detail"]["hugepages"] = serde_json::json!({
                    "regions": h.regions, "collapsed": h.collapsed, "bytes": h.bytes,
                    "collapsed_bytes": h.collapsed_bytes, "us": h.micros,
                });
            }
        }
        if let Some(prof) = &prof {
            let (ops, slow) = summarize(prof, 8);
            v["profile_mode"] = prof_mode.into();
            v["profile_total_ms"] = prof.iter().map(|p| p.ms).sum::<f64>().into();
            v["profile_host_ms"] = prof.iter().map(|p| p.host_ms).sum::<f64>().into();
            if prof_mode == Some("gpu-timestamps") {
                v["profile_gpu_ms"] = prof.iter().filter_map(|p| p.gpu_ms).sum::<f64>().into();
            }
            v["profile_ops"] = ops.iter().map(|(o, c, ms)| serde_json::json!([o, c, ms])).collect();
            v["profile_slowest"] =
                slow.iter().map(|p| serde_json::json!([p.op, p.name, p.ms])).collect();
            // [op, name, wall ms (synchronized), host ms, GPU ms or null]
            v["profile_steps"] = prof
                .iter()
                .map(|p| serde_json::json!([p.op, p.name, p.ms, p.host_ms, p.gpu_ms]))
                .collect();
        }
        println!("{v}");
    } else {
        println!(
            "{} on {place}, batch {}, {} iterations, precision {}",
            model.display(),
            a.batch,
            a.iterations,
            a.precision
        );
        println!("  plan: {}", plan.summary());
        println!("  latency ms: p50 {p50:.3}  p90 {p90:.3}  p99 {p99:.3}  mean {mean:.3}");
        println!(
            "  host time to record a run (before waiting for the device): p50 {host_p50:.3} ms \
             ({:.2} us/step)",
            host_p50 * 1e3 / plan.steps.len().max(1) as f64
        );
        if !parts.is_empty() {
            println!("  host time per run, p50 of each part (us): {}", HostParts::p50_json(&parts));
        }
        if mean > 0.0 {
            println!("  throughput: {:.1} inferences/s", a.batch as f64 * 1e3 / mean);
        }
        if let Some(prof) = &prof {
            let total: f64 = prof.iter().map(|p| p.ms).sum();
            println!(
                "  profile (synchronized after every step, mean of {} runs): {total:.3} ms in {} steps",
                a.profile_repeat.max(1),
                prof.len()
            );
            let host: f64 = prof.iter().map(|p| p.host_ms).sum();
            let steps = prof.len().max(1) as f64;
            match prof_mode {
                Some("gpu-timestamps") => {
                    let gpu: f64 = prof.iter().filter_map(|p| p.gpu_ms).sum();
                    println!(
                        "  profile mode gpu-timestamps: GPU {gpu:.3} ms ({:.1} us/step), host \
                         record step by step (no replay) {host:.3} ms ({:.1} us/step)",
                        gpu * 1e3 / steps,
                        host * 1e3 / steps
                    );
                }
                _ => println!(
                    "  profile mode sync-per-step (no GPU timestamps): host record step by step \
                     (no replay) {host:.3} ms ({:.1} us/step)",
                    host * 1e3 / steps
                ),
            }
            let (ops, slow) = summarize(prof, 8);
            for (op, count, ms) in ops {
                println!("    {op:<24} {count:>4} steps {ms:>10.3} ms");
            }
            println!("  slowest steps:");
            for p in slow {
                let gpu = p.gpu_ms.map_or(String::new(), |g| format!("  gpu {g:.3} ms"));
                println!(
                    "    {:<24} {:<40} {:>10.3} ms  host {:.3} ms{gpu}",
                    p.op, p.name, p.ms, p.host_ms
                );
            }
        }
    }
    Ok(())
}
