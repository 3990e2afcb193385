//! Softmax / log-softmax — and f32 row sums, means and L2 norms — with the whole row held in
//! registers (`ReduceMode::RowRegs`).
//!
//! Why a separate kernel: the generic row kernel keeps an online (max, sum-of-exp) pair, which
//! costs a branch and an `exp` per element in the statistics pass and reads the row a second
//! time from memory for the output pass. For rows of up to `16 × 256` scalars or
//! `8 × 256 × 4` floats (`vec4`), each of the 256 threads instead loads its share once — all
//! loads issued before any arithmetic, for memory-level parallelism — then the workgroup reduces
//! the maximum, computes `exp(x - max)` once per element (kept in registers), reduces the sum
//! and writes. One read, one write, one `exp` per element: the bandwidth floor.
//!
//! Special values match the CPU reference (`cpu/softmax.rs`): elements equal to the maximum
//! count 1 in the sum and `-inf` elements 0 (so `+inf` rows give NaN at the `+inf` entries and
//! 0 elsewhere, all-`-inf` rows give NaN), and a NaN anywhere makes the row NaN (through the
//! sum, whatever `max` does with NaN operands). Padding lanes past the row's end hold `-inf`,
//! which is neutral for both reductions.
//!
//! Short rows (BERT's attention rows of 128 scores: 32 `vec4`s) share a workgroup: `seg`
//! threads per row (a power of two, 32–256), `256 / seg` rows per workgroup, and the two
//! reductions run over each row's segment of threads (`log2(seg)` steps instead of 8) — a row
//! of 32 `vec4`s otherwise kept 224 of 256 threads idle through 16 barriers.
//!
//! Sums reuse the structure (every load issued first, then one f32 tree instead of the generic
//! kernel's four-field accumulator tree); padding lanes hold 0 there.

use crate::REDUCE_WG;
use std::fmt::Write;

/// Most chunks a thread holds (scalar rows up to `16 × 256` elements; `vec4` rows use ≤ 8).
pub const MAX_CHUNKS: u8 = 16;
/// Most `vec4` chunks per thread the launcher asks for (rows up to 8192 floats).
pub const MAX_VEC4_CHUNKS: u8 = 8;

/// What a register-row kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegsOp {
    Softmax,
    LogSoftmax,
    /// Row sum; `mean` divides by the row length, `square` sums squares and takes the root.
    Sum {
        mean: bool,
        square: bool,
    },
}

/// The kernel body after the shared helpers (`mw`, `ld`, `kept_in`/`kept_out`, `roff`, `ninf`).
///
/// `seg`: threads per row (a power of two dividing 256; 256 = one row per workgroup). Sums
/// take whole workgroups only.
pub fn regs_main(op: RegsOp, vec4: bool, chunks: u8, seg: u32) -> String {
    if let RegsOp::Sum { mean, square } = op {
        return sum_main(mean, square, vec4, chunks);
    }
    let log = op == RegsOp::LogSoftmax;
    let c = chunks as u32;
    let zero = if vec4 { "vec4<f32>(ninf())" } else { "ninf()" };
    let mut s = tree_fns(seg);
    if vec4 {
        s.push_str("fn hmax(q: vec4<f32>) -> f32 { return max(max(q.x, q.y), max(q.z, q.w)); }\n");
        s.push_str("fn term(e: vec4<f32>, x: vec4<f32>, m: f32) -> f32 {\n  let t = select(select(e, vec4<f32>(1.0), x == vec4<f32>(m)), vec4<f32>(0.0), x == vec4<f32>(ninf()));\n  return t.x + t.y + t.z + t.w;\n}\n");
    } else {
        s.push_str("fn hmax(q: f32) -> f32 { return q; }\n");
        s.push_str("fn term(e: f32, x: f32, m: f32) -> f32 {\n  return select(select(e, 1.0, x == m), 0.0, x == ninf());\n}\n");
    }
    s.push_str(&main_and_loads(vec4, chunks, zero, seg));
    // Softmax rows are written back: the row's output base (and, scalar, its stride).
    if vec4 {
        s.push_str("  let ob = u32(kept_out(o)) >> 2u;\n");
    } else {
        s.push_str("  let ob = kept_out(o); let ors = i32(mw(4u));\n");
    }
    let maxes: Vec<String> = (0..c).map(|i| format!("hmax(x{i})")).collect();
    let lm = maxes.iter().skip(1).fold(maxes[0].clone(), |a, b| format!("max({a}, {b})"));
    let _ = writeln!(s, "  let m = wg_max({lm}, tid);");
    for i in 0..c {
        let _ = writeln!(s, "  let e{i} = exp(x{i} - m);");
    }
    let terms: Vec<String> = (0..c).map(|i| format!("term(e{i}, x{i}, m)")).collect();
    let _ = writeln!(s, "  let sum = wg_sum({}, tid);", terms.join(" + "));
    if log {
        s.push_str("  let lse = m + log(sum);\n");
    }
    for i in 0..c {
        let val = if log { format!("x{i} - lse") } else { format!("e{i} / sum") };
        let dst = if vec4 { format!("ob + k{i}") } else { format!("u32(ob + i32(k{i}) * ors)") };
        let _ = writeln!(s, "  if (k{i} < n) {{ out[{dst}] = {val}; }}");
    }
    s.push_str("}\n");
    s
}

/// `wg_max` / `wg_sum`: tree reductions over one f32 per thread within each segment of `seg`
/// threads (256: the whole workgroup); the trailing barrier lets `red` be reused.
fn tree_fns(seg: u32) -> String {
    let wg = REDUCE_WG;
    let mut s = format!("var<workgroup> red: array<f32, {wg}>;\n");
    let (lane, first) = if seg >= wg {
        ("tid".to_string(), "0u".to_string())
    } else {
        (format!("(tid % {seg}u)"), format!("tid - tid % {seg}u"))
    };
    for (name, f) in [("wg_max", "max"), ("wg_sum", "")] {
        let comb = if f.is_empty() {
            "red[tid] + red[tid + st]".to_string()
        } else {
            format!("{f}(red[tid], red[tid + st])")
        };
        let _ = writeln!(
            s,
            "fn {name}(v: f32, tid: u32) -> f32 {{\n  red[tid] = v;\n  workgroupBarrier();\n  for (var st = {}u; st > 0u; st = st >> 1u) {{\n    if ({lane} < st) {{ red[tid] = {comb}; }}\n    workgroupBarrier();\n  }}\n  let r = red[{first}];\n  workgroupBarrier();\n  return r;\n}}",
            seg.min(wg) / 2
        );
    }
    s
}

/// The entry point's opening: row `o` of workgroup `wid` (returning past the last row), its
/// length `R`, input base, element count `n` (vec4s when `vec4`) and `chunks` loads per thread
/// into `x0..`, all issued before any arithmetic (independent, so they are in flight together);
/// lanes past the row hold `pad`.
///
/// With `seg` < 256 threads per row, thread `tid` serves row `wgid·(256/seg) + tid/seg` as
/// lane `tid % seg`; a row past the last one gets `n = 0` (no loads, no stores) instead of an
/// early return, which would leave the reductions' barriers in non-uniform control flow.
fn main_and_loads(vec4: bool, chunks: u8, pad: &str, seg: u32) -> String {
    let wg = REDUCE_WG;
    let seg = seg.min(wg);
    let mut s = format!("@compute @workgroup_size({wg})\n");
    s.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n");
    let lane = if seg == wg {
        s.push_str("  let o = wid.x + wid.y * nwg.x;\n  if (o >= mw(0u)) { return; }\n");
        s.push_str("  let live = true;\n");
        "tid".to_string()
    } else {
        let _ = writeln!(
            s,
            "  let o0 = (wid.x + wid.y * nwg.x) * {}u + tid / {seg}u;\n  let live = o0 < mw(0u);\n  let o = select(0u, o0, live);",
            wg / seg
        );
        format!("(tid % {seg}u)")
    };
    s.push_str("  let R = mw(1u);\n  let base = i32(mw(2u)) + kept_in(o);\n");
    if vec4 {
        s.push_str("  let n = select(0u, R >> 2u, live); let b4 = u32(base) >> 2u;\n");
    } else {
        s.push_str("  let n = select(0u, R, live);\n");
    }
    for i in 0..chunks as u32 {
        let load =
            if vec4 { format!("inp[b4 + k{i}]") } else { format!("ld(u32(base + roff(k{i})))") };
        let _ = writeln!(
            s,
            "  let k{i} = {lane} + {}u;\n  var x{i} = {pad};\n  if (k{i} < n) {{ x{i} = {load}; }}",
            i * seg
        );
    }
    s
}

/// Row sum / mean / L2 norm with every load issued before the first add.
fn sum_main(mean: bool, square: bool, vec4: bool, chunks: u8) -> String {
    let mut s = tree_fns(REDUCE_WG);
    let zero = if vec4 { "vec4<f32>(0.0)" } else { "0.0" };
    s.push_str(&main_and_loads(vec4, chunks, zero, REDUCE_WG));
    let term = |i: u32| if square { format!("x{i} * x{i}") } else { format!("x{i}") };
    let sum = (1..chunks as u32).fold(term(0), |a, i| format!("{a} + {}", term(i)));
    if vec4 {
        let _ = writeln!(s, "  let q = {sum};\n  let t = wg_sum((q.x + q.y) + (q.z + q.w), tid);");
    } else {
        let _ = writeln!(s, "  let t = wg_sum({sum}, tid);");
    }
    let fin = match (mean, square) {
        (true, _) => "t / f32(R)",
        (_, true) => "sqrt(t)",
        _ => "t",
    };
    let _ = writeln!(s, "  if (tid == 0u) {{ out[orow(o)] = {fin}; }}\n}}");
    s
}
