//! In-process A/B of the f32 tiled GEMM's planners and tunes (issue 23, `BENCH_ONLY=gemm32` in
//! `bench_ops_a`): every variant runs in one process on a GPU kept busy, so variants compare
//! at the same clock.
//!
//! `GEMM_AB` lists the variants, `;`-separated: `gen1` (the legacy planner, checked modules),
//! `gen2` (the tuned planner, with the environment's stream-K rule: the wave model unless
//! `MPSRT_GEMM_SK` says otherwise), or a tune's text (`128x64_db1_wl1`) forced on every shape;
//! suffixes `@s<N>` (N K slices), `@w<N>` (N stream-K workgroups for an `_sk` tune), `@ck` /
//! `@uc` (bounds checks kept / dropped), `@r4` / `@r1` (split-K partials summed in vec4s with
//! the slice count baked in / by the scalar loop); `gen2sk` is generation 2 with the stream-K rule
//! (`MPSRT_GEMM_SK=1`'s choice), `gen2sk2` with the wave-model rule (`MPSRT_GEMM_SK=2`),
//! `gen2sk0` with stream-K off whatever the environment says. `GEMM_AB_SHAPES`
//! picks shape sets: `b8` (BERT-base's linear layers at batch 8, with the model's epilogues:
//! bias, bias + GELU, bias + residual, as one `[1024, K]` matrix), `b8z` (the same as the engine
//! runs them: `[8, 128, K]` times a broadcast weight), `b16z` (batch 16 so), `b1` (batch 1), `sq` (4096³, no
//! epilogue), `sqk` (4096² at K = 768 and 3072, no epilogue), `att` (b8's per-head attention products, 96 of `q·kᵀ` and `p·v`).
//! Each (variant, shape) is first checked against the legacy kernel's output on the same
//! operands, and the legacy output once per shape against the CPU product; then ≥ 0.5 s of
//! warm-up, then `GEMM_AB_ROUNDS` (5) rounds of ~`GEMM_AB_MS` (20) ms per (shape, variant) in
//! an order rotated per round (`GEMM_AB_BUDGET_S`, 40: no new round past it). One JSON line per
//! (shape, variant): median / min / max ms and TFLOP/s over the rounds.

use mpsrt_tensor::{self as mt, Activation, DType, GemmOverride, GemmTune, Place, Result, Tensor};
use std::time::Instant;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// A variant label → its override.
fn parse(label: &str) -> std::result::Result<GemmOverride, String> {
    let mut parts = label.split('@');
    let head = parts.next().unwrap_or_default();
    let mut o = match head {
        "gen1" => GemmOverride { generation: Some(1), ..Default::default() },
        "gen2" => GemmOverride { generation: Some(2), ..Default::default() },
        "gen2sk" => GemmOverride { generation: Some(2), stream_k: Some(1), ..Default::default() },
        "gen2sk0" => GemmOverride { generation: Some(2), stream_k: Some(0), ..Default::default() },
        "gen2sk2" => GemmOverride { generation: Some(2), stream_k: Some(2), ..Default::default() },
        t => GemmOverride {
            generation: Some(2),
            tune: Some(GemmTune::parse(t)?),
            ..Default::default()
        },
    };
    for p in parts {
        match p {
            "ck" => o.checked = Some(true),
            "uc" => o.checked = Some(false),
            "r4" => o.reduce4 = Some(true),
            "r1" => o.reduce4 = Some(false),
            w if w.starts_with('w') => {
                o.sk_wgs = Some(w[1..].parse().map_err(|_| format!("{label}: bad workgroups"))?)
            }
            s if s.starts_with('s') => {
                o.slices = Some(s[1..].parse().map_err(|_| format!("{label}: bad slices"))?)
            }
            _ => return Err(format!("{label}: unknown suffix @{p}")),
        }
    }
    Ok(o)
}

/// One benchmark product: `x [m, k] · w [k, n]` (+ bias, + epilogue).
struct Shape {
    name: String,
    m: usize,
    n: usize,
    k: usize,
    x: Tensor,
    w: Tensor,
    bias: Option<Tensor>,
    res: Option<Tensor>,
    act: Option<Activation>,
}

impl Shape {
    /// `x` is `[z, m / z, k]` (the engine's batched form: B broadcast over `z` sequences) when
    /// `z > 1`, else `[m, k]`.
    fn new(name: &str, [m, n, k]: [usize; 3], z: usize, epi: (bool, bool, bool)) -> Result<Self> {
        let (bias, res, gelu) = epi;
        let g = Place::Gpu(0);
        let r = |s: &[usize]| mt::randn(s, DType::F32, g);
        let rows = |c: usize| if z > 1 { vec![z, m / z, c] } else { vec![m, c] };
        Ok(Shape {
            name: name.into(),
            m,
            n,
            k,
            x: r(&rows(k))?,
            w: r(&[k, n])?,
            bias: if bias { Some(r(&[n])?) } else { None },
            res: if res { Some(r(&rows(n))?) } else { None },
            act: gelu.then_some(Activation::Gelu),
        })
    }

    fn run(&self) -> Result<Tensor> {
        if self.bias.is_none() && self.res.is_none() && self.act.is_none() {
            return mt::matmul(&self.x, &self.w);
        }
        mt::matmul_fused(&self.x, &self.w, self.bias.as_ref(), self.res.as_ref(), self.act)
    }

    fn cpu(&self) -> Result<Tensor> {
        let c = |t: &Tensor| t.to(Place::Cpu);
        let (b, r) =
            (self.bias.as_ref().map(c).transpose()?, self.res.as_ref().map(c).transpose()?);
        mt::matmul_fused(&c(&self.x)?, &c(&self.w)?, b.as_ref(), r.as_ref(), self.act)
    }
}

/// max |a − b| / max |b|.
fn rel_err(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (a, b) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let scale = b.iter().fold(0.0f64, |s, v| s.max(v.abs())).max(1e-30);
    let e = a.iter().zip(&b).fold(0.0f64, |e, (x, y)| e.max((x - y).abs())) / scale;
    Ok(if e.is_finite() { e } else { f64::INFINITY })
}

fn shapes(sets: &str) -> Result<Vec<Shape>> {
    let mut v = Vec::new();
    for set in sets.split(',') {
        if set == "att" {
            v.extend(attention()?);
            continue;
        }
        let (m, z) = match set {
            "b8" => (1024, 1),
            "b8z" => (1024, 8),
            "b16z" => (2048, 16),
            "b1" => (128, 1),
            "sq" => {
                v.push(Shape::new("4096^3", [4096, 4096, 4096], 1, (false, false, false))?);
                continue;
            }
            // Full waves at BERT's K (no epilogue): what K = 768 / 3072 cost per block
            // apart from partial waves.
            "sqk" => {
                for k in [768, 3072] {
                    let name = format!("4096x4096x{k}");
                    v.push(Shape::new(&name, [4096, 4096, k], 1, (false, false, false))?);
                }
                continue;
            }
            _ => continue,
        };
        let zs = if z > 1 { format!("{z}x") } else { String::new() };
        let mut add = |name: &str, n: usize, k: usize, epi| -> Result<()> {
            let label = format!("{name} {zs}{}x{n}x{k}", m / z);
            v.push(Shape::new(&label, [m, n, k], z, epi)?);
            Ok(())
        };
        add("qkv", 2304, 768, (true, false, false))?;
        add("out", 768, 768, (true, true, false))?;
        add("ffn_up", 3072, 768, (true, false, true))?;
        add("ffn_down", 768, 3072, (true, true, false))?;
    }
    Ok(v)
}

/// BERT-base b8's per-head attention products with the engine's operand views: `q·kᵀ`
/// (`[8, 12, 128, 64]` views of `[8, 128, 12, 64]`, kᵀ contiguous along K) and `p·v` (`p`
/// contiguous, `v` a view), 96 matrices each.
fn attention() -> Result<Vec<Shape>> {
    let g = Place::Gpu(0);
    let r = |s: &[usize]| mt::randn(s, DType::F32, g);
    let heads = |perm: &[isize]| r(&[8, 128, 12, 64])?.permute(perm);
    let shape = |name: &str, mnk: [usize; 3], x: Tensor, w: Tensor| Shape {
        name: name.into(),
        m: 96 * mnk[0],
        n: mnk[1],
        k: mnk[2],
        x,
        w,
        bias: None,
        res: None,
        act: None,
    };
    Ok(vec![
        shape("qk 96x128x128x64", [128, 128, 64], heads(&[0, 2, 1, 3])?, heads(&[0, 2, 3, 1])?),
        shape("pv 96x128x64x128", [128, 64, 128], r(&[8, 12, 128, 128])?, heads(&[0, 2, 1, 3])?),
    ])
}

/// Runs the A/B (see the module docs).
pub fn run(dev: &mpsrt_runtime::GpuDevice) -> Result<()> {
    let labels: Vec<String> = env("GEMM_AB", "gen1;gen2")
        .split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut variants = Vec::new();
    for l in &labels {
        match parse(l) {
            Ok(o) => variants.push((l.clone(), o)),
            Err(e) => println!("{{\"gemm_ab_skip\": \"{l}\", \"reason\": \"{e}\"}}"),
        }
    }
    let rounds: usize = env("GEMM_AB_ROUNDS", "5").parse().unwrap_or(5);
    let target_ms: f64 = env("GEMM_AB_MS", "20").parse().unwrap_or(20.0);
    let shapes = shapes(&env("GEMM_AB_SHAPES", "b8,b1,sq"))?;
    // Checks (and every pipeline compiled before timing).
    let started = Instant::now();
    let legacy = GemmOverride { generation: Some(1), ..Default::default() };
    let mut ok = vec![vec![true; variants.len()]; shapes.len()];
    for (si, s) in shapes.iter().enumerate() {
        mt::set_gemm_override(legacy);
        let want = s.run()?;
        let cpu_err = if s.m * s.n * s.k <= 1 << 33 { rel_err(&want, &s.cpu()?)? } else { -1.0 };
        println!("{{\"gemm_ab_check\": \"{}\", \"variant\": \"gen1\", \"vs\": \"cpu\", \"rel_err\": {cpu_err:.3e}}}", s.name);
        for (vi, (l, o)) in variants.iter().enumerate() {
            mt::set_gemm_override(*o);
            let e = rel_err(&s.run()?, &want)?;
            ok[si][vi] = e < 1e-4;
            println!("{{\"gemm_ab_check\": \"{}\", \"variant\": \"{l}\", \"vs\": \"gen1\", \"rel_err\": {e:.3e}, \"ok\": {}}}", s.name, ok[si][vi]);
        }
    }
    // Warm-up: back-to-back calls of the first shape.
    let t0 = Instant::now();
    mt::set_gemm_override(legacy);
    while t0.elapsed().as_secs_f64() < 0.5 {
        for _ in 0..8 {
            shapes[0].run()?;
        }
        dev.synchronize()?;
    }
    // Calls per measurement: about target_ms at the legacy kernel's speed.
    let mut iters = Vec::new();
    for s in &shapes {
        s.run()?;
        dev.synchronize()?;
        let t = Instant::now();
        for _ in 0..3 {
            s.run()?;
        }
        dev.synchronize()?;
        let ms = t.elapsed().as_secs_f64() * 1e3 / 3.0;
        iters.push(((target_ms / ms.max(1e-3)) as usize).clamp(3, 2000));
    }
    let mut times = vec![vec![Vec::new(); variants.len()]; shapes.len()];
    let pairs: Vec<(usize, usize)> =
        (0..shapes.len()).flat_map(|s| (0..variants.len()).map(move |v| (s, v))).collect();
    // `GEMM_AB_BUDGET_S` (40) bounds the timed rounds (counted from the first check): a round
    // that would start past it is skipped, so a long list still reports.
    let budget: f64 = env("GEMM_AB_BUDGET_S", "40").parse().unwrap_or(40.0);
    for r in 0..rounds {
        if r > 0 && started.elapsed().as_secs_f64() > budget {
            println!("{{\"gemm_ab_budget\": {budget}, \"rounds_done\": {r}}}");
            break;
        }
        for j in 0..pairs.len() {
            let (si, vi) = pairs[(j + r * variants.len().max(1) + r) % pairs.len()];
            mt::set_gemm_override(variants[vi].1);
            let s = &shapes[si];
            s.run()?;
            dev.synchronize()?;
            let t = Instant::now();
            for _ in 0..iters[si] {
                s.run()?;
            }
            dev.synchronize()?;
            times[si][vi].push(t.elapsed().as_secs_f64() * 1e3 / iters[si] as f64);
        }
    }
    mt::set_gemm_override(GemmOverride::default());
    for (si, s) in shapes.iter().enumerate() {
        let flop = 2.0 * (s.m * s.n * s.k) as f64;
        for (vi, (l, _)) in variants.iter().enumerate() {
            let mut t = times[si][vi].clone();
            if t.is_empty() {
                continue;
            }
            t.sort_by(|a, b| a.total_cmp(b));
            let med = t[t.len() / 2];
            let tf = |ms: f64| flop / (ms * 1e-3) / 1e12;
            println!(
                "{{\"gemm_ab\": \"{}\", \"variant\": \"{l}\", \"ms_med\": {med:.4}, \"ms_min\": {:.4}, \"ms_max\": {:.4}, \"tflops_med\": {:.2}, \"tflops_best\": {:.2}, \"iters\": {}, \"ok\": {}}}",
                s.name,
                t[0],
                t[t.len() - 1],
                tf(med),
                tf(t[0]),
                iters[si],
                ok[si][vi]
            );
        }
    }
    Ok(())
}
