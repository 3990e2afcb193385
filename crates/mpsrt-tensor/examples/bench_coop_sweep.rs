//! Sweep of the cooperative-matrix f16 GEMM kernels (issue 23) on GPU 0: every variant —
//! the tiled GEMM (`MPSRT_COOP_MATMUL=0`), generations 1 and 2, and each tune of generation
//! 3's family (`CoopTune::sweep`) — runs in a fresh process (under Vulkan the H100's SM clock
//! drops a few seconds into a busy process, so each child stays short: a correctness check,
//! then 3 warm-ups + `SWEEP_ITERS` (20) timed calls per shape). One CSV line per variant:
//!
//! `variant,kernel,check_ok,max_rel_err,ms_4096,tflops_4096,ms_bert,tflops_bert,ms_1024,tflops_1024`
//!
//! where `kernel` is what actually ran (`matmul_kernel_name`: a tune whose workgroup memory
//! does not fit falls back to generation 1 and says so), `bert` is `[M, N, K] = [2048, 3072,
//! 768]` (BERT-base's FFN up-projection at 16 × 128 tokens), and the check compares odd shapes
//! (edge workgroups, broadcast batch, a transposed B, K not a multiple of 8) and an aligned
//! one (interior and direct-load paths) with the f32 tiled GEMM of the same f16 values.
//!
//! Run: `cargo run --release -p mpsrt-tensor --example bench_coop_sweep` (or
//! `bash bench/gpu.sh coopsweep`). `COOP_VARIANTS="1 2 w2x2_t4x4_k32_p8_db0_fi1_dg1_wl1"`
//! picks variants (`default`: the planner's choice per shape, `tiled`: no matrix units); `SWEEP_BUDGET_S` (default 480) bounds the whole sweep, `SWEEP_CHILD_S`
//! (30) each child, `SWEEP_SHAPES` the timed shapes; tunes not verified on hardware (`fi1`, `dg1`,
//! `wl1`: `CoopTune::unverified`) run as generation 1 unless `MPSRT_COOP_EXPERIMENTAL=1`;
//! `COOP_VARIANTS=experimental` times `CoopTune::experimental()` with it set, and
//! `COOP_VARIANTS=structures` times `CoopTune::structures()` (with it set, between runs of
//! the default); `COOP_VARIANTS=pipelined` times `CoopTune::pipelined()` (`@f32out`, the
//! default after every fourth). A variant suffixed `@f32out` (`default@f32out`) runs with
//! `MPSRT_COOP_F16_OUT=0`: the kernel writes f32 and the timed calls include the separate
//! f32 → f16 cast of the product (what every f16 matmul did before generation 3 wrote f16);
//! `@f16out` sets it to 1, `@splitk` sets `MPSRT_COOP_SPLITK=1` (suffixes combine:
//! `default@splitk@f16out`).
//!
//! `COOP_AB="default fi1_rp1_vs4_uc1 ..."` times the variants in one process instead, rounds
//! of back-to-back calls after a warm-up (`support/coop_ab.rs`; `COOP_AB_SHAPES`,
//! `COOP_AB_ROUNDS`, `COOP_AB_MS`).
//!
//! `COOP_STATS="default sp1_db1_fi1_vs4_uc1 ..."` prints the NVIDIA compiler's statistics
//! (registers per thread, ...) of each variant's 4096³ kernel instead (`support/coop_stats.rs`;
//! `COOP_STATS_DIR` receives the driver's internal representations, if any).

#[path = "support/coop_ab.rs"]
mod coop_ab;
#[path = "support/coop_stats.rs"]
mod coop_stats;

use mpsrt_kernels::CoopTune;
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SHAPES: [[usize; 3]; 3] = [[4096, 4096, 4096], [2048, 3072, 768], [1024, 1024, 1024]];

fn main() {
    if let Ok(list) = std::env::var("COOP_STATS") {
        // The driver's compile statistics (registers per thread) of each variant's 4096³
        // kernel instead of timings (`support/coop_stats.rs`).
        let v: Vec<String> = list.split_whitespace().map(String::from).collect();
        let dir = std::env::var("COOP_STATS_DIR").ok();
        if let Err(e) = coop_stats::run(&v, dir.as_deref()) {
            println!("# coop stats failed: {e}");
        }
        return;
    }
    if let Ok(list) = std::env::var("COOP_AB") {
        // In-process A/B (`support/coop_ab.rs`); unverified tunes run too.
        std::env::set_var("MPSRT_COOP_EXPERIMENTAL", "1");
        // `prefetch`: the default, the default with split-K, then `CoopTune::prefetch()`.
        let v: Vec<String> = list
            .split_whitespace()
            .flat_map(|s| match s {
                "prefetch" => ["default".to_string(), "default@splitk".to_string()]
                    .into_iter()
                    .chain(CoopTune::prefetch().iter().map(CoopTune::name))
                    .collect(),
                // `occupancy`: the default, then `CoopTune::occupancy()` (11th session).
                "occupancy" => std::iter::once("default".to_string())
                    .chain(CoopTune::occupancy().iter().map(CoopTune::name))
                    .collect(),
                s => vec![s.to_string()],
            })
            .collect();
        if let Err(e) = coop_ab::run(&v, check) {
            println!("# coop A/B failed: {e}");
        }
        return;
    }
    if let Ok(variant) = std::env::var("MPSRT_COOP_SWEEP_CHILD") {
        // The row's label: the variant text the parent was given.
        match child(&variant) {
            Ok(line) => println!("{line}"),
            Err(e) => println!("{variant},error: {},false,,,,,,,", e.to_string().replace(',', ";")),
        }
        return;
    }
    let variants: Vec<String> = match std::env::var("COOP_VARIANTS") {
        // The unverified knobs, run with MPSRT_COOP_EXPERIMENTAL=1 (set below for children).
        Ok(v) if v == "experimental" => ["1"]
            .iter()
            .map(|s| s.to_string())
            .chain(CoopTune::experimental().iter().map(CoopTune::name))
            .collect(),
        // The candidate structures, between runs of the default (clock drift shows as a
        // difference between the three baseline rows).
        Ok(v) if v == "structures" => {
            let t = CoopTune::structures();
            let (first, second) = t.split_at(t.len() / 2);
            let names = |s: &[CoopTune]| s.iter().map(CoopTune::name).collect::<Vec<_>>();
            [vec!["3".into()], names(first), vec!["3".into()], names(second)]
                .concat()
                .into_iter()
                .chain(["3".to_string()])
                .collect()
        }
        // The pipelined candidates with the f32 store (`@f32out`: the scratch of an f16
        // store would not fit their two slabs), the default after every fourth.
        Ok(v) if v == "pipelined" => {
            let mut names = vec!["default".to_string()];
            for (i, t) in CoopTune::pipelined().iter().enumerate() {
                names.push(format!("{}@f32out", t.name()));
                if i % 4 == 3 {
                    names.push("default".into());
                }
            }
            names.push("default".into());
            names
        }
        Ok(v) => v.split([' ', ';', '\n']).filter(|s| !s.is_empty()).map(String::from).collect(),
        Err(_) => ["tiled", "1", "2"]
            .iter()
            .map(|s| s.to_string())
            .chain(CoopTune::sweep().iter().map(CoopTune::name))
            .collect(),
    };
    let secs = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (budget, per_child) = (secs("SWEEP_BUDGET_S", 480), secs("SWEEP_CHILD_S", 30));
    println!("variant,kernel,check_ok,max_rel_err,ms_4096,tflops_4096,ms_bert,tflops_bert,ms_1024,tflops_1024");
    let exe = std::env::current_exe().expect("current_exe");
    let t0 = Instant::now();
    // Per shape column: the best (TFLOP/s, variant, kernel) among the rows whose check passed.
    let mut best: [Option<(f64, String, String)>; 3] = Default::default();
    for (i, v) in variants.iter().enumerate() {
        if t0.elapsed() > Duration::from_secs(budget) {
            println!("# budget of {budget} s spent: {} variants not run", variants.len() - i);
            break;
        }
        let mut cmd = Command::new(&exe);
        cmd.env("MPSRT_COOP_SWEEP_CHILD", v).stdout(Stdio::piped());
        // Suffixes: `<variant>@f32out` — the kernel writes f32 and the product is cast in a
        // second pass (A/B of `MPSRT_COOP_F16_OUT`); `@splitk` — `MPSRT_COOP_SPLITK=1`
        // (split-K for grids of fewer than 128 blocks); `@f16out` — `MPSRT_COOP_F16_OUT=1`.
        let mut v: &str = v;
        let suffixes = [
            ("@f32out", "MPSRT_COOP_F16_OUT", "0"),
            ("@f16out", "MPSRT_COOP_F16_OUT", "1"),
            ("@splitk", "MPSRT_COOP_SPLITK", "1"),
        ];
        while let Some((base, key, val)) =
            suffixes.iter().find_map(|&(sfx, k, x)| v.strip_suffix(sfx).map(|b| (b, k, x)))
        {
            cmd.env(key, val);
            v = base;
        }
        let v = &v.to_string();
        if std::env::var("COOP_VARIANTS")
            .is_ok_and(|v| v == "experimental" || v == "structures" || v == "pipelined")
        {
            cmd.env("MPSRT_COOP_EXPERIMENTAL", "1");
        }
        if v == "tiled" {
            cmd.env("MPSRT_COOP_MATMUL", "0").env_remove("MPSRT_COOP_VARIANT");
        } else if v == "default" {
            // The planner's choice per shape (`default_coop_variant`).
            cmd.env_remove("MPSRT_COOP_VARIANT");
        } else {
            cmd.env("MPSRT_COOP_VARIANT", v);
        }
        let mut proc = match cmd.spawn() {
            Ok(p) => p,
            Err(e) => {
                println!("{v},spawn failed: {e},false,,,,,,,");
                continue;
            }
        };
        let start = Instant::now();
        let status = loop {
            match proc.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() > Duration::from_secs(per_child) => {
                    let _ = proc.kill();
                    let _ = proc.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        let mut out = String::new();
        if let Some(mut o) = proc.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        let line = out.lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
        match status {
            Some(s) if s.success() && !line.is_empty() => {
                println!("{line}");
                let f: Vec<&str> = line.split(',').collect();
                if f.len() == 10 && f[2] == "true" {
                    for (c, b) in best.iter_mut().enumerate() {
                        let tf: f64 = f[5 + 2 * c].parse().unwrap_or(0.0);
                        if b.as_ref().is_none_or(|b| tf > b.0) {
                            *b = Some((tf, f[0].to_string(), f[1].to_string()));
                        }
                    }
                }
            }
            Some(s) => println!("{v},child failed ({s}),false,,,,,,,"),
            None => println!("{v},child timed out after {per_child} s,false,,,,,,,"),
        }
    }
    for (c, b) in best.iter().enumerate() {
        if let Some((tf, v, k)) = b {
            println!("# best for shape column {c}: {v} ({k}) at {tf:.2} TFLOP/s");
        }
    }
}

/// One variant: the correctness check, then the timings, as one CSV line.
fn child(variant: &str) -> Result<String> {
    let dev = mpsrt_runtime::gpu_device(0)?;
    let g = Place::Gpu(0);
    let (ok, err) = check()?;
    let kernel = mt::matmul_kernel_name(0, DType::F16, SHAPES[0])?.replace(',', ";");
    let iters: usize = std::env::var("SWEEP_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let mut cols = Vec::new();
    // `SWEEP_SHAPES="256x256x256 ..."` (M×N×K, three of them) replaces the timed shapes: a
    // smoke run on a machine without matrix units.
    let shapes: Vec<[usize; 3]> = match std::env::var("SWEEP_SHAPES") {
        Ok(v) => v
            .split_whitespace()
            .filter_map(|s| {
                let d: Vec<usize> = s.split('x').filter_map(|x| x.parse().ok()).collect();
                (d.len() == 3).then(|| [d[0], d[1], d[2]])
            })
            .collect(),
        Err(_) => SHAPES.to_vec(),
    };
    for [m, n, k] in shapes {
        let a = mt::randn(&[m, k], DType::F32, g)?.astype(DType::F16)?;
        let b = mt::randn(&[k, n], DType::F32, g)?.astype(DType::F16)?;
        for _ in 0..3 {
            mt::matmul(&a, &b)?;
        }
        dev.synchronize()?;
        let t0 = Instant::now();
        for _ in 0..iters {
            mt::matmul(&a, &b)?;
        }
        dev.synchronize()?;
        let ms = t0.elapsed().as_secs_f64() * 1e3 / iters as f64;
        let tf = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
        cols.push(format!("{ms:.4},{tf:.2}"));
    }
    Ok(format!("{variant},{kernel},{ok},{err:.2e},{}", cols.join(",")))
}

/// f16 products on the GPU against the f32 tiled GEMM of the same (f16) values: largest error
/// relative to max |reference| over the cases, and whether every case stays under 2e-3 (the
/// f16 rounding of the product is 2^-11 of a value; an indexing error is O(1)).
fn check() -> Result<(bool, f64)> {
    let g = Place::Gpu(0);
    let h =
        |shape: &[usize]| -> Result<Tensor> { mt::randn(shape, DType::F32, g)?.astype(DType::F16) };
    let cases = [
        // Edge workgroups, a broadcast batch, 8-wide staging of both operands.
        (h(&[3, 200, 136])?, h(&[136, 264])?),
        // Whole blocks of every tune and K a multiple of every K step: the interior and
        // direct-load paths (and their `aligned` specializations).
        (h(&[256, 320])?, h(&[320, 512])?),
        // Whole blocks with an odd number of K-16 steps: the register ring's last step.
        (h(&[256, 336])?, h(&[336, 256])?),
        // B transposed (strided staging).
        (h(&[200, 136])?, h(&[264, 136])?.transpose(0, 1)?),
        // Nothing a multiple of 8: scalar staging everywhere, partial K slabs.
        (h(&[197, 67])?, h(&[67, 131])?),
        // Few blocks and a long K: split into 4 slices with `MPSRT_COOP_SPLITK=1`, whole
        // blocks and edge blocks.
        (h(&[256, 1024])?, h(&[1024, 256])?),
        (h(&[200, 1024])?, h(&[1024, 264])?),
    ];
    let (mut ok, mut worst) = (true, 0.0f64);
    for (a, b) in cases {
        let want = mt::matmul(&a.astype(DType::F32)?, &b.astype(DType::F32)?)?.to_f64_vec()?;
        let got = mt::matmul(&a, &b)?.astype(DType::F32)?.to_f64_vec()?;
        let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        let err = want.iter().zip(&got).fold(0.0f64, |e, (w, g)| e.max((w - g).abs())) / scale;
        ok &= err < 2e-3 && got.iter().all(|v| v.is_finite()) && got.len() == want.len();
        worst = worst.max(if err.is_nan() { f64::INFINITY } else { err });
    }
    Ok((ok, worst))
}
