//! Reduction and softmax kernels rendered from a [`ReduceSpec`].
//!
//! Techniques: a reduction is a set of "rows" (one per output element) addressed through
//! coalesced kept/reduced dims (shape + strides in the metadata block, rank baked into the
//! source). `Row` mode gives each row one 256-thread workgroup: strided-coalesced loads, a
//! per-thread accumulator, then a workgroup-memory tree reduction (8 barrier steps).
//! `RowVec4` is the same for contiguous f32 rows with 128-bit `vec4` loads, unrolled 4× for
//! memory-level parallelism. `Col` mode (reductions over non-innermost axes) gives each row one
//! thread, so neighbouring threads read neighbouring addresses. One accumulator struct serves
//! every op: sums, products, NaN-propagating max/min, arg-max/min with first-index ties (NaN
//! counts as the maximum), Welford/Chan moments (var/std), and an online max/sum-of-exp pair
//! (logsumexp, softmax, log_softmax: one read pass for the statistics, one for the output).

use crate::softmax::RegsOp;
use mpsrt_core::DType;
use std::fmt::Write;

/// What a reduction kernel computes per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Prod,
    Max,
    Min,
    ArgMax,
    ArgMin,
    Var,
    Std,
    LogSumExp,
    Norm2,
    /// Mean to `out[o]`, variance (with correction) to `out[n_out + o]`.
    Moments,
    Softmax,
    LogSoftmax,
}

impl ReduceOp {
    /// Softmax-like ops write a full row instead of one value.
    pub fn writes_rows(self) -> bool {
        matches!(self, ReduceOp::Softmax | ReduceOp::LogSoftmax)
    }
    /// Ops whose output is an index (i32).
    pub fn is_arg(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }
    /// Ops that run in i32 on i32 inputs (the rest need float inputs).
    pub fn int_ok(self) -> bool {
        matches!(
            self,
            ReduceOp::Sum
                | ReduceOp::Prod
                | ReduceOp::Max
                | ReduceOp::Min
                | ReduceOp::ArgMax
                | ReduceOp::ArgMin
        )
    }
}

/// How rows map onto threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceMode {
    Row,
    RowVec4,
    Col,
    /// Softmax ops only: the whole row lives in registers (`chunks` values — `vec4`s when
    /// `vec4` — per thread), so it is read once and `exp` runs once per element. `seg`
    /// threads serve one row (a power of two, 32–256; below 256 only for softmax ops): a
    /// workgroup then holds `256 / seg` short rows (dispatch `ceil(rows / (256 / seg))`
    /// workgroups).
    RowRegs {
        vec4: bool,
        chunks: u8,
        seg: u16,
    },
}

/// Everything that determines a reduction kernel's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReduceSpec {
    pub op: ReduceOp,
    /// F32, F16 or I32.
    pub input: DType,
    /// Rank of the (coalesced) kept dims.
    pub kept: usize,
    /// Rank of the (coalesced) reduced dims (1 for softmax).
    pub red: usize,
    pub mode: ReduceMode,
}

/// Threads per workgroup of every reduction kernel.
pub const REDUCE_WG: u32 = 256;

/// Metadata words before the dims: `[rows, R, in_offset, param, out_row_stride, row_base,
/// out_base, n_out]`. A launch split into binding windows (`mpsrt-tensor/src/gpu/window.rs`)
/// records one dispatch per range of kept rows: `rows` rows from global row `row_base`, the
/// input bound from a window (`in_offset` relative to it, as i32) and the output bound from
/// element `out_base` (subtracted from every output index). Unsplit: `rows = n_out`, bases 0.
pub const REDUCE_META_HEAD: usize = 8;

impl ReduceSpec {
    /// The metadata block: head, then kept shape, kept input strides, kept output strides,
    /// reduced shape, reduced strides.
    #[allow(clippy::too_many_arguments)]
    pub fn meta(
        &self,
        n_out: usize,
        r: usize,
        offset: usize,
        param: f32,
        out_row_stride: usize,
        kept: (&[usize], &[isize], &[isize]),
        red: (&[usize], &[isize]),
    ) -> Vec<u32> {
        let mut w =
            vec![n_out as u32, r as u32, offset as u32, param.to_bits(), out_row_stride as u32];
        w.resize(REDUCE_META_HEAD, 0);
        w[7] = n_out as u32;
        w.extend(kept.0.iter().map(|&d| d as u32));
        w.extend(kept.1.iter().map(|&s| s as i32 as u32));
        w.extend(kept.2.iter().map(|&s| s as i32 as u32));
        w.extend(red.0.iter().map(|&d| d as u32));
        w.extend(red.1.iter().map(|&s| s as i32 as u32));
        w
    }

    /// The register-row variant of this op, if it has one.
    pub fn regs_op(&self) -> Option<RegsOp> {
        Some(match self.op {
            ReduceOp::Softmax => RegsOp::Softmax,
            ReduceOp::LogSoftmax => RegsOp::LogSoftmax,
            ReduceOp::Sum => RegsOp::Sum { mean: false, square: false },
            ReduceOp::Mean => RegsOp::Sum { mean: true, square: false },
            ReduceOp::Norm2 => RegsOp::Sum { mean: false, square: true },
            _ => return None,
        })
    }

    fn int(&self) -> bool {
        self.input == DType::I32
    }

    /// Render the WGSL source; fails for combinations the launcher never asks for.
    pub fn render(&self) -> Result<String, String> {
        if !matches!(self.input, DType::F32 | DType::F16 | DType::I32) {
            return Err(format!("reduction input must be f32, f16 or i32, got {}", self.input));
        }
        if self.int() && !self.op.int_ok() {
            return Err(format!("{:?} needs a float input", self.op));
        }
        if self.mode == ReduceMode::RowVec4 && self.input != DType::F32 {
            return Err("vec4 rows need f32".into());
        }
        if self.op.writes_rows() && self.red != 1 {
            return Err("softmax reduces exactly one axis".into());
        }
        if let ReduceMode::RowRegs { vec4, chunks, seg } = self.mode {
            if self.regs_op().is_none() || self.int() || (vec4 && self.input != DType::F32) {
                return Err(
                    "register rows are for float softmax, sum, mean and norm (vec4: f32)".into()
                );
            }
            if !(1..=crate::softmax::MAX_CHUNKS).contains(&chunks) {
                return Err(format!("register rows hold 1..=16 chunks, got {chunks}"));
            }
            let seg_ok = seg.is_power_of_two() && (32..=REDUCE_WG as u16).contains(&seg);
            if !seg_ok || (seg < REDUCE_WG as u16 && !self.op.writes_rows()) {
                return Err(format!(
                    "register rows take 32..=256 threads per row (a power of two; fewer than 256 for softmax only), got {seg}"
                ));
            }
        }
        let (nk, nr) = (self.kept, self.red);
        let words = (REDUCE_META_HEAD + 3 * nk + 2 * nr).div_ceil(4).max(1);
        let vt = if self.int() { "i32" } else { "f32" };
        let vec4 =
            matches!(self.mode, ReduceMode::RowVec4 | ReduceMode::RowRegs { vec4: true, .. });
        let mut s = String::with_capacity(8192);
        let _ = writeln!(s, "// generated by mpsrt-kernels: reduce {self:?}");
        let _ = writeln!(s, "struct Meta {{ w: array<vec4<u32>, {words}> }};");
        let in_ty = match (self.input, vec4) {
            (_, true) => "vec4<f32>",
            (DType::F16, _) => "u32",
            (DType::I32, _) => "i32",
            _ => "f32",
        };
        let out_elem = if self.op.is_arg() || self.int() { "i32" } else { "f32" };
        let out_ty = if vec4 && self.op.writes_rows() { "vec4<f32>" } else { out_elem };
        let _ = writeln!(s, "@group(0) @binding(0) var<storage, read> inp: array<{in_ty}>;");
        let _ = writeln!(s, "@group(0) @binding(1) var<storage, read_write> out: array<{out_ty}>;");
        let _ = writeln!(s, "@group(0) @binding(2) var<uniform> M: Meta;");
        s.push_str(COMMON);
        let _ = writeln!(s, "struct Acc {{ v: {vt}, m: f32, n: f32, i: u32 }};");
        if !vec4 {
            let ld = match self.input {
                DType::F16 => "unpack2x16float(inp[e >> 1u])[e & 1u]",
                _ => "inp[e]",
            };
            let _ = writeln!(s, "fn ld(e: u32) -> {vt} {{ return {ld}; }}");
        }
        s.push_str(&self.acc_fns(vt));
        s.push_str(&offset_fns(nk, nr));
        match self.mode {
            ReduceMode::Col => s.push_str(&self.col_main()),
            ReduceMode::RowRegs { vec4, chunks, seg } => {
                let op = self.regs_op().ok_or("register rows: unsupported op")?;
                s.push_str(&crate::softmax::regs_main(op, vec4, chunks, seg as u32))
            }
            _ => s.push_str(&self.row_main(vec4)),
        }
        Ok(s)
    }

    /// `acc_init`, `acc_add` (one element at reduced index r), `acc_merge`, `acc_final`.
    fn acc_fns(&self, vt: &str) -> String {
        use ReduceOp::*;
        let int = self.int();
        let (lo, hi) = if int { ("(-2147483647 - 1)", "2147483647") } else { ("ninf()", "pinf()") };
        let init_v = match self.op {
            Prod => if int { "1" } else { "1.0" }.to_string(),
            Max | ArgMax => lo.to_string(),
            Min | ArgMin => hi.to_string(),
            _ if int => "0".into(),
            _ => "0.0".into(),
        };
        let m0 = if matches!(self.op, LogSumExp | Softmax | LogSoftmax) { "ninf()" } else { "0.0" };
        let mut s =
            format!("fn acc_init() -> Acc {{ return Acc({init_v}, {m0}, 0.0, 0xffffffffu); }}\n");
        let nanchk = |e: &str| if int { "false".to_string() } else { format!("is_nan({e})") };
        let (add, merge) = match self.op {
            Sum | Mean => ("a.v = a.v + x;".to_string(), "a.v = a.v + b.v;".to_string()),
            Norm2 => ("a.v = a.v + x * x;".into(), "a.v = a.v + b.v;".into()),
            Prod => ("a.v = a.v * x;".into(), "a.v = a.v * b.v;".into()),
            Max | Min => {
                let f = if self.op == Max { "max" } else { "min" };
                let body = |y: &str| {
                    if int {
                        format!("a.v = {f}(a.v, {y});")
                    } else {
                        format!("if (is_nan(a.v) || is_nan({y})) {{ a.v = nan(); }} else {{ a.v = {f}(a.v, {y}); }}")
                    }
                };
                (body("x"), body("b.v"))
            }
            ArgMax | ArgMin => {
                let cmp = if self.op == ArgMax { ">" } else { "<" };
                let xn = nanchk("x");
                let yn = nanchk("y");
                s.push_str(&format!(
                    "fn beats(x: {vt}, xi: u32, y: {vt}, yi: u32) -> bool {{\n  if (xi == 0xffffffffu) {{ return false; }}\n  if (yi == 0xffffffffu) {{ return true; }}\n  let xn = {xn}; let yn = {yn};\n  if (xn || yn) {{ if (xn && yn) {{ return xi < yi; }} return xn; }}\n  if (x == y) {{ return xi < yi; }}\n  return x {cmp} y;\n}}\n"
                ));
                (
                    "if (beats(x, r, a.v, a.i)) { a.v = x; a.i = r; }".into(),
                    "if (beats(b.v, b.i, a.v, a.i)) { a = b; }".into(),
                )
            }
            Var | Std | Moments => (
                "a.n = a.n + 1.0; let d = x - a.m; a.m = a.m + d / a.n; a.v = a.v + d * (x - a.m);"
                    .into(),
                concat!(
                    "if (b.n == 0.0) { return a; } if (a.n == 0.0) { return b; }\n",
                    "  let n = a.n + b.n; let d = b.m - a.m;\n",
                    "  a.m = a.m + d * (b.n / n); a.v = a.v + b.v + d * d * (a.n * b.n / n); a.n = n;"
                )
                .into(),
            ),
            LogSumExp | Softmax | LogSoftmax => (
                concat!(
                    "if (is_nan(x) || is_nan(a.m)) { a.m = nan(); return a; }\n",
                    "  if (is_ninf(x)) { return a; }\n",
                    "  if (x == a.m) { a.v = a.v + 1.0; } else if (x > a.m) { a.v = a.v * exp(a.m - x) + 1.0; a.m = x; } else { a.v = a.v + exp(x - a.m); }"
                )
                .into(),
                concat!(
                    "if (is_nan(a.m) || is_nan(b.m)) { a.m = nan(); return a; }\n",
                    "  if (is_ninf(b.m)) { return a; } if (is_ninf(a.m)) { return b; }\n",
                    "  if (a.m == b.m) { a.v = a.v + b.v; } else if (a.m > b.m) { a.v = a.v + b.v * exp(b.m - a.m); } else { a.v = b.v + a.v * exp(a.m - b.m); a.m = b.m; }"
                )
                .into(),
            ),
        };
        let _ = writeln!(
            s,
            "fn acc_add(a0: Acc, x: {vt}, r: u32) -> Acc {{\n  var a = a0;\n  {add}\n  return a;\n}}"
        );
        let _ = writeln!(
            s,
            "fn acc_merge(a0: Acc, b: Acc) -> Acc {{\n  var a = a0;\n  {merge}\n  return a;\n}}"
        );
        let var = "let den = max(f32(R) - bitcast<f32>(mw(3u)), 0.0);\n  var v = a.v / den;\n  if (den <= 0.0) { v = select(pinf(), nan(), a.v == 0.0 || is_nan(a.v)); }";
        let fin = match self.op {
            Mean => "if (R == 0u) { return nan(); } return a.v / f32(R);".to_string(),
            Norm2 => "return sqrt(a.v);".into(),
            ArgMax | ArgMin => "return i32(a.i);".into(),
            Var | Moments => format!("{var}\n  return v;"),
            Std => format!("{var}\n  return sqrt(v);"),
            LogSumExp | Softmax | LogSoftmax => {
                "if (is_nan(a.m) || is_inf(a.m)) { return a.m; } return a.m + log(a.v);".into()
            }
            _ => "return a.v;".into(),
        };
        let ot = if self.op.is_arg() || int { "i32" } else { "f32" };
        let _ = writeln!(s, "fn acc_final(a: Acc, R: u32) -> {ot} {{\n  {fin}\n}}");
        s
    }

    /// Write the result of row `o` (reductions) from thread 0 / the row's thread.
    fn store_result(&self) -> &'static str {
        if self.op == ReduceOp::Moments {
            "out[orow(o)] = select(t.m, nan(), R == 0u); out[mw(7u) + orow(o)] = acc_final(t, R);"
        } else {
            "out[orow(o)] = acc_final(t, R);"
        }
    }

    fn softmax_val(&self) -> &'static str {
        if self.op == ReduceOp::Softmax {
            "exp(x - t.m) / t.v"
        } else {
            "x - lse"
        }
    }

    fn row_main(&self, vec4: bool) -> String {
        let wg = REDUCE_WG;
        let mut s = format!("var<workgroup> sh: array<Acc, {wg}>;\n");
        let _ = writeln!(s, "@compute @workgroup_size({wg})");
        s.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n");
        s.push_str("  let o = wid.x + wid.y * nwg.x;\n  if (o >= mw(0u)) { return; }\n");
        s.push_str(
            "  let R = mw(1u);\n  let base = i32(mw(2u)) + kept_in(o);\n  var a = acc_init();\n",
        );
        if vec4 {
            let _ = writeln!(
                s,
                "  let n4 = R >> 2u; let b4 = u32(base) >> 2u;\n  var k = tid;\n  loop {{\n    if (k + {w3}u >= n4) {{ break; }}\n    let q0 = inp[b4 + k]; let q1 = inp[b4 + k + {wg}u]; let q2 = inp[b4 + k + {w2}u]; let q3 = inp[b4 + k + {w3}u];\n    a = add4(a, q0, 4u * k); a = add4(a, q1, 4u * (k + {wg}u)); a = add4(a, q2, 4u * (k + {w2}u)); a = add4(a, q3, 4u * (k + {w3}u));\n    k = k + {w4}u;\n  }}\n  for (; k < n4; k = k + {wg}u) {{ a = add4(a, inp[b4 + k], 4u * k); }}",
                w2 = 2 * wg,
                w3 = 3 * wg,
                w4 = 4 * wg
            );
        } else {
            let _ = writeln!(
                s,
                "  for (var r = tid; r < R; r = r + {wg}u) {{ a = acc_add(a, ld(u32(base + roff(r))), r); }}"
            );
        }
        s.push_str("  sh[tid] = a;\n  workgroupBarrier();\n");
        let _ = writeln!(
            s,
            "  for (var st = {}u; st > 0u; st = st >> 1u) {{\n    if (tid < st) {{ sh[tid] = acc_merge(sh[tid], sh[tid + st]); }}\n    workgroupBarrier();\n  }}",
            wg / 2
        );
        s.push_str("  let t = sh[0];\n");
        if self.op.writes_rows() {
            s.push_str("  let lse = acc_final(t, R);\n");
            let val = self.softmax_val();
            if vec4 {
                let _ = writeln!(
                    s,
                    "  let ob4 = u32(kept_out(o)) >> 2u;\n  for (var k2 = tid; k2 < n4; k2 = k2 + {wg}u) {{\n    let x = inp[b4 + k2];\n    out[ob4 + k2] = {val};\n  }}"
                );
            } else {
                let _ = writeln!(
                    s,
                    "  let ob = kept_out(o); let ors = i32(mw(4u));\n  for (var r = tid; r < R; r = r + {wg}u) {{\n    let x = ld(u32(base + roff(r)));\n    out[u32(ob + i32(r) * ors)] = {val};\n  }}"
                );
            }
        } else {
            let _ = writeln!(s, "  if (tid == 0u) {{ {} }}", self.store_result());
        }
        s.push_str("}\n");
        if vec4 {
            s.push_str("fn add4(a0: Acc, q: vec4<f32>, r: u32) -> Acc {\n  var a = acc_add(a0, q.x, r);\n  a = acc_add(a, q.y, r + 1u);\n  a = acc_add(a, q.z, r + 2u);\n  return acc_add(a, q.w, r + 3u);\n}\n");
        }
        s
    }

    fn col_main(&self) -> String {
        let wg = REDUCE_WG;
        let mut s = format!("@compute @workgroup_size({wg})\n");
        s.push_str("fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n");
        let _ = writeln!(s, "  let o = gid.x + gid.y * nwg.x * {wg}u;");
        s.push_str("  if (o >= mw(0u)) { return; }\n");
        s.push_str(
            "  let R = mw(1u);\n  let base = i32(mw(2u)) + kept_in(o);\n  var t = acc_init();\n",
        );
        s.push_str("  for (var r = 0u; r < R; r = r + 1u) { t = acc_add(t, ld(u32(base + roff(r))), r); }\n");
        if self.op.writes_rows() {
            let val = self.softmax_val();
            let _ = writeln!(
                s,
                "  let lse = acc_final(t, R);\n  let ob = kept_out(o); let ors = i32(mw(4u));\n  for (var r = 0u; r < R; r = r + 1u) {{\n    let x = ld(u32(base + roff(r)));\n    out[u32(ob + i32(r) * ors)] = {val};\n  }}"
            );
        } else {
            let _ = writeln!(s, "  {}", self.store_result());
        }
        s.push_str("}\n");
        s
    }
}

const COMMON: &str = "fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }
fn orow(o: u32) -> u32 { return o + mw(5u) - mw(6u); }
fn nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn pinf() -> f32 { return bitcast<f32>(0x7f800000u); }
fn ninf() -> f32 { return bitcast<f32>(0xff800000u); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn is_ninf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
";

/// `kept_in(o)` / `kept_out(o)`: offsets of row `o`; `roff(r)`: offset of reduced element `r`.
fn offset_fns(nk: usize, nr: usize) -> String {
    let h = REDUCE_META_HEAD;
    let mut s = String::new();
    // Rows are numbered from the window's first (`row_base`); outputs relative to `out_base`.
    for (name, soff, ret) in
        [("kept_in", h + nk, "off"), ("kept_out", h + 2 * nk, "off - i32(mw(6u))")]
    {
        let _ = writeln!(s, "fn {name}(o: u32) -> i32 {{\n  var rem = o + mw(5u); var off = 0;");
        for d in (0..nk).rev() {
            let _ = writeln!(
                s,
                "  {{ let sz = mw({}u); off = off + i32(rem % sz) * bitcast<i32>(mw({}u)); rem = rem / sz; }}",
                h + d,
                soff + d
            );
        }
        let _ = writeln!(s, "  return {ret};\n}}");
    }
    let (rs, rt) = (h + 3 * nk, h + 3 * nk + nr);
    if nr == 1 {
        let _ =
            writeln!(s, "fn roff(r: u32) -> i32 {{ return i32(r) * bitcast<i32>(mw({rt}u)); }}");
    } else {
        s.push_str("fn roff(r: u32) -> i32 {\n  var rem = r; var off = 0;\n");
        for d in (0..nr).rev() {
            let _ = writeln!(
                s,
                "  {{ let sz = mw({}u); off = off + i32(rem % sz) * bitcast<i32>(mw({}u)); rem = rem / sz; }}",
                rs + d,
                rt + d
            );
        }
        s.push_str("  return off;\n}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reduce_variant_validates_and_translates_to_msl() {
        use ReduceOp::*;
        let ops = [
            Sum, Mean, Prod, Max, Min, ArgMax, ArgMin, Var, Std, LogSumExp, Norm2, Moments,
            Softmax, LogSoftmax,
        ];
        for op in ops {
            for input in [DType::F32, DType::F16, DType::I32] {
                for mode in [
                    ReduceMode::Row,
                    ReduceMode::RowVec4,
                    ReduceMode::Col,
                    ReduceMode::RowRegs { vec4: true, chunks: 3, seg: 256 },
                    ReduceMode::RowRegs { vec4: false, chunks: 16, seg: 256 },
                    ReduceMode::RowRegs { vec4: true, chunks: 1, seg: 32 },
                    ReduceMode::RowRegs { vec4: false, chunks: 2, seg: 64 },
                ] {
                    for (kept, red) in [(0, 1), (2, 1), (1, 3)] {
                        let spec = ReduceSpec { op, input, kept, red, mode };
                        let Ok(src) = spec.render() else { continue };
                        crate::validate::wgsl_to_msl(&src)
                            .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                    }
                }
            }
        }
        let bad =
            ReduceSpec { op: Mean, input: DType::I32, kept: 0, red: 1, mode: ReduceMode::Row };
        assert!(bad.render().is_err());
        let bad =
            ReduceSpec { mode: ReduceMode::RowRegs { vec4: true, chunks: 1, seg: 256 }, ..bad };
        assert!(bad.render().is_err(), "no integer register rows");
        let bad = ReduceSpec { op: Max, input: DType::F32, ..bad };
        assert!(bad.render().is_err(), "no register rows for max");
        let bad = ReduceSpec {
            op: Softmax,
            input: DType::F32,
            mode: ReduceMode::RowRegs { vec4: false, chunks: 17, seg: 256 },
            ..bad
        };
        assert!(bad.render().is_err(), "chunk bound");
        for seg in [16, 48, 512] {
            let bad =
                ReduceSpec { mode: ReduceMode::RowRegs { vec4: true, chunks: 1, seg }, ..bad };
            assert!(bad.render().is_err(), "threads per row {seg}");
        }
        let sum = ReduceSpec {
            op: Sum,
            mode: ReduceMode::RowRegs { vec4: true, chunks: 1, seg: 32 },
            ..bad
        };
        assert!(sum.render().is_err(), "sums take whole workgroups");
    }
}
