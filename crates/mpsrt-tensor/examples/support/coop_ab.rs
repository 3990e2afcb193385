//! In-process A/B of cooperative-matrix GEMM kernels (issue 23, `COOP_AB`): every variant runs
//! in one process on a GPU kept busy, so pairs compare at the same clock (fresh child processes
//! start on a GPU that has clocked down while idle, and one call of 4096³ is 0.7 ms: far less
//! than the 0.2–0.5 s the driver needs to clock back up).
//!
//! For each variant (a tune's text, `default`, optionally suffixed `@f32out` / `@f16out` /
//! `@splitk`):
//! the correctness check of `bench_coop_sweep` (f32 GEMM of the same f16 values on the GPU)
//! plus one f32 CPU reference product and the fused linear layer's epilogue (bias, residual,
//! GELU) against the CPU, then one compile call per shape. Then ≥ 0.6 s of
//! warm-up, then `COOP_AB_ROUNDS` (5) rounds; each round times every (shape, variant) for
//! about `COOP_AB_MS` (30) ms of back-to-back calls, in an order rotated per round. One CSV
//! line per (variant, shape): the median, min and max TFLOP/s over the rounds (each
//! measurement also as a `# r<round>,...` line as it lands). `COOP_AB_BUDGET_S` (60) bounds
//! the run.

use mpsrt_kernels::matmul_coop_tune::{set_coop_override, CoopOverride};
use mpsrt_kernels::CoopVariant;
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::time::Instant;

/// A row's overrides: variant, f16 output, split-K target.
type Knobs = (Option<CoopVariant>, Option<bool>, Option<usize>);

/// The overrides a row label asks for: `@f32out` / `@f16out`, `@splitk` (split-K on, 192
/// workgroups; off otherwise).
fn parse(label: &str) -> std::result::Result<Knobs, String> {
    let mut v = label;
    let (mut f16, mut splitk) = (None, Some(0));
    loop {
        if let Some(b) = v.strip_suffix("@f32out") {
            (v, f16) = (b, Some(false));
        } else if let Some(b) = v.strip_suffix("@f16out") {
            (v, f16) = (b, Some(true));
        } else if let Some(b) = v.strip_suffix("@splitk") {
            (v, splitk) = (b, Some(192));
        } else {
            break;
        }
    }
    let variant = if v == "default" { None } else { Some(CoopVariant::parse(v)?) };
    Ok((variant, f16, splitk))
}

fn apply((variant, f16_out, splitk): Knobs) {
    set_coop_override(CoopOverride { variant, f16_out, splitk });
}

/// The largest error of an f16 GPU product against the f32 CPU product of the same values,
/// relative to the largest |reference|.
fn cpu_check(m: usize, n: usize, k: usize) -> Result<f64> {
    let g = Place::Gpu(0);
    let a = mt::randn(&[m, k], DType::F32, g)?.astype(DType::F16)?;
    let b = mt::randn(&[k, n], DType::F32, g)?.astype(DType::F16)?;
    let (ac, bc) = (a.astype(DType::F32)?.to(Place::Cpu)?, b.astype(DType::F32)?.to(Place::Cpu)?);
    let want = mt::matmul(&ac, &bc)?.to_f64_vec()?;
    let got = mt::matmul(&a, &b)?.astype(DType::F32)?.to_f64_vec()?;
    let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs()));
    let err = want.iter().zip(&got).fold(0.0f64, |e, (w, g)| e.max((w - g).abs())) / scale;
    Ok(if err.is_finite() { err } else { f64::INFINITY })
}

/// The engine's fused linear layer (`matmul_fused`: f16 operands, bias, residual, GELU — the
/// cooperative kernel's epilogue) on the GPU against the CPU's f32 `matmul_fused` of the same
/// values, at whole blocks (256×512×320) and edge blocks (200×264×136): largest error relative
/// to max |reference|.
fn epilogue_check() -> Result<f64> {
    let g = Place::Gpu(0);
    let h = |s: &[usize]| -> Result<Tensor> {
        mt::randn(s, DType::F32, Place::Cpu)?.astype(DType::F16)
    };
    let mut worst = 0.0f64;
    for (m, n, k) in [(256usize, 512usize, 320usize), (200, 264, 136)] {
        let (a, b, bias, res) = (h(&[m, k])?, h(&[k, n])?, h(&[n])?, h(&[m, n])?);
        let f = |t: &Tensor| t.astype(DType::F32);
        let gelu = Some(mt::Activation::Gelu);
        let want = mt::matmul_fused(&f(&a)?, &f(&b)?, Some(&f(&bias)?), Some(&f(&res)?), gelu)?;
        let got =
            mt::matmul_fused(&a.to(g)?, &b.to(g)?, Some(&bias.to(g)?), Some(&res.to(g)?), gelu)?;
        let (want, got) = (want.to_f64_vec()?, got.astype(DType::F32)?.to_f64_vec()?);
        let scale = want.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        let err = want.iter().zip(&got).fold(0.0f64, |e, (w, g)| e.max((w - g).abs())) / scale;
        worst = worst.max(if err.is_finite() { err } else { f64::INFINITY });
    }
    Ok(worst)
}

fn shapes() -> Vec<[usize; 3]> {
    let text = std::env::var("COOP_AB_SHAPES")
        .unwrap_or_else(|_| "4096x4096x4096 1024x3072x768 1024x768x3072 1024x768x768".into());
    text.split_whitespace()
        .filter_map(|s| {
            let d: Vec<usize> = s.split('x').filter_map(|x| x.parse().ok()).collect();
            (d.len() == 3).then(|| [d[0], d[1], d[2]])
        })
        .collect()
}

/// Run the A/B of `labels`; `check` is the sweep's correctness check (`(ok, max_rel_err)`).
pub fn run(labels: &[String], check: fn() -> Result<(bool, f64)>) -> Result<()> {
    let dev = mpsrt_runtime::gpu_device(0)?;
    let g = Place::Gpu(0);
    let num = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (rounds, window) = (num("COOP_AB_ROUNDS", 5) as usize, num("COOP_AB_MS", 30) as f64);
    // The whole run's budget: checks and compiles stop at 65% of it (the variants left are
    // not timed), rounds stop when the next would not fit.
    let budget = num("COOP_AB_BUDGET_S", 60) as f64;
    let start = Instant::now();
    let shapes = shapes();
    let mut vars: Vec<(String, Knobs)> = Vec::new();
    for l in labels {
        match parse(l) {
            Ok(v) => vars.push((l.clone(), v)),
            Err(e) => println!("# {l}: {e}"),
        }
    }
    let operands: Vec<(Tensor, Tensor)> = shapes
        .iter()
        .map(|&[m, n, k]| {
            let a = mt::randn(&[m, k], DType::F32, g)?.astype(DType::F16)?;
            let b = mt::randn(&[k, n], DType::F32, g)?.astype(DType::F16)?;
            Ok((a, b))
        })
        .collect::<Result<_>>()?;
    // Checks, kernel names, compiles.
    let mut info = Vec::new();
    for (i, (label, knobs)) in vars.iter().enumerate() {
        if start.elapsed().as_secs_f64() > 0.65 * budget {
            println!("# budget: {} variants not checked or timed", vars.len() - i);
            break;
        }
        apply(*knobs);
        let (ok, err) = check()?;
        let cpu = cpu_check(256, 512, 320)?;
        let epi = epilogue_check()?;
        let ok = ok && cpu < 2e-3 && epi < 4e-3;
        let names: Vec<String> = shapes
            .iter()
            .map(|&s| mt::matmul_kernel_name(0, DType::F16, s).map(|k| k.replace(',', ";")))
            .collect::<Result<_>>()?;
        for (a, b) in &operands {
            mt::matmul(a, b)?;
        }
        dev.synchronize()?;
        println!("# {label}: check {ok} (max rel err {err:.2e} vs f32 GPU, {cpu:.2e} vs f32 CPU, bias+residual+GELU epilogue {epi:.2e} vs f32 CPU)");
        info.push((ok, err.max(cpu), names));
    }
    // Warm-up: the clock comes up after 0.2–0.5 s of work.
    apply((None, None, Some(0)));
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < 0.6 {
        let (a, b) = &operands[0];
        for _ in 0..4 {
            mt::matmul(a, b)?;
        }
        dev.synchronize()?;
    }
    vars.truncate(info.len());
    let mut tf = vec![vec![Vec::new(); shapes.len()]; vars.len()];
    let mut round_s = 0.0;
    for r in 0..rounds {
        let t_round = Instant::now();
        if start.elapsed().as_secs_f64() + round_s > budget {
            println!("# budget: {} of {rounds} rounds run", r);
            break;
        }
        for (si, &[m, n, k]) in shapes.iter().enumerate() {
            let (a, b) = &operands[si];
            for j in 0..vars.len() {
                let vi = (j + r) % vars.len();
                apply(vars[vi].1);
                // Estimate one call, then time about `window` ms of calls.
                let t = Instant::now();
                for _ in 0..2 {
                    mt::matmul(a, b)?;
                }
                dev.synchronize()?;
                let one = t.elapsed().as_secs_f64() * 1e3 / 2.0;
                let iters = ((window / one.max(1e-3)) as usize).clamp(5, 2000);
                let t = Instant::now();
                for _ in 0..iters {
                    mt::matmul(a, b)?;
                }
                dev.synchronize()?;
                let ms = t.elapsed().as_secs_f64() * 1e3 / iters as f64;
                let t = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
                println!("# r{r},{},{m}x{n}x{k},{t:.2}", vars[vi].0);
                tf[vi][si].push(t);
            }
        }
        round_s = t_round.elapsed().as_secs_f64();
    }
    apply((None, None, None));
    println!(
        "variant,shape,kernel,check_ok,max_rel_err,tflops_median,tflops_min,tflops_max,rounds"
    );
    for (vi, (label, _)) in vars.iter().enumerate() {
        let (ok, err, names) = &info[vi];
        for (si, [m, n, k]) in shapes.iter().enumerate() {
            let mut v = tf[vi][si].clone();
            v.sort_by(f64::total_cmp);
            let med = v.get(v.len() / 2).copied().unwrap_or(0.0);
            let (lo, hi) = (v.first().copied().unwrap_or(0.0), v.last().copied().unwrap_or(0.0));
            println!(
                "{label},{m}x{n}x{k},{},{ok},{err:.2e},{med:.2},{lo:.2},{hi:.2},{}",
                names[si],
                v.len()
            );
        }
    }
    Ok(())
}
