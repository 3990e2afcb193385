//! Attention's softmax in one pass (issue 23): `p = softmax(x · scale + mask)` over each row of
//! contiguous f32 scores, with the rows whose maximum is `-inf` (every key masked) written as
//! zeros — the ONNX `Attention` rule, and what transformers' NaN guard `Where(IsNaN(p), 0, p)`
//! gives after an unfused softmax. The engine's f32 attention composes `q·kᵀ` (a GEMM), this
//! kernel and `p·v` (a GEMM): the unfused chain ran the scale + mask add, the softmax and the
//! NaN guard as three passes over the `[B, H, Sq, Skv]` scores.
//!
//! Layout: `seg` threads per row (a power of two ≤ [`MASKED_SOFTMAX_WG`]), each holding
//! `chunks` units (`vec4`s when the row length and offset are multiples of 4, else scalars) in
//! registers — unit `lane + c · seg`, so a warp's loads cover whole rows — all loads issued
//! before any arithmetic. The two reductions (max, then the sum of exponentials) go through
//! workgroup memory with one barrier each: every thread writes its partial and then reads its
//! row's `seg` partials itself, instead of a `log2(seg)`-step tree with a barrier per step.
//!
//! The mask is an f32 view broadcast to the scores (stride 0 on broadcast dims): the rows are
//! split into three coalesced dims `[d0, d1, d2]` with a mask stride each, plus the key stride;
//! its elements are read as scalars (a padding mask is a few KiB, cached).
//!
//! Bindings: `x`, \[`mask`\], `y`, then the metadata uniform (3 × vec4 words): `rows`, units per
//! row, `scale` bits, `x` offset (units); mask offset, key stride, `d1`, `d2`; mask strides of
//! `d0`, `d1`, `d2`, and a spare word.

use std::fmt::Write;

/// Threads per workgroup.
pub const MASKED_SOFTMAX_WG: u32 = 128;
/// Most units a thread holds (rows of up to `8 × 128` units).
pub const MASKED_SOFTMAX_MAX_CHUNKS: u32 = 8;

/// One specialization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaskedSoftmaxSpec {
    /// Units are `vec4<f32>` (row length and `x` offset multiples of 4).
    pub vec4: bool,
    /// A mask binding is present.
    pub mask: bool,
    /// Threads per row: a power of two, 1..=[`MASKED_SOFTMAX_WG`].
    pub seg: u32,
    /// Units each thread holds, 1..=[`MASKED_SOFTMAX_MAX_CHUNKS`].
    pub chunks: u32,
}

impl MaskedSoftmaxSpec {
    /// `(seg, chunks)` for rows of `units` units: the fewest threads per row that keep each
    /// thread at ≤ 8 units (BERT's 128 scores: 4 threads of 8 `vec4`s), or `seg` forced (a
    /// power of two, for tuning); `None` when the row is too long.
    pub fn plan(units: u32, seg: Option<u32>) -> Option<(u32, u32)> {
        if units == 0 {
            return Some((1, 1));
        }
        let seg = match seg {
            Some(s) if s.is_power_of_two() && s <= MASKED_SOFTMAX_WG => s,
            _ => units.div_ceil(MASKED_SOFTMAX_MAX_CHUNKS).next_power_of_two(),
        };
        let chunks = units.div_ceil(seg);
        (seg <= MASKED_SOFTMAX_WG && chunks <= MASKED_SOFTMAX_MAX_CHUNKS).then_some((seg, chunks))
    }

    /// Rows each workgroup computes.
    pub fn rows_per_workgroup(&self) -> u32 {
        MASKED_SOFTMAX_WG / self.seg.max(1)
    }

    /// The WGSL text.
    pub fn render(&self) -> String {
        let (seg, c, wg) = (self.seg.max(1), self.chunks.max(1), MASKED_SOFTMAX_WG);
        let ty = if self.vec4 { "vec4<f32>" } else { "f32" };
        let mut w = String::new();
        let _ = writeln!(
            w,
            "// softmax(x * scale + mask) per row, zeros for rows whose max is -inf: {seg} threads \
             per row, {c} {ty} each in registers, one barrier per reduction."
        );
        let mut b = 0;
        let _ = writeln!(w, "@group(0) @binding({b}) var<storage, read> x: array<{ty}>;");
        b += 1;
        if self.mask {
            let _ = writeln!(w, "@group(0) @binding({b}) var<storage, read> mk: array<f32>;");
            b += 1;
        }
        let _ = writeln!(w, "@group(0) @binding({b}) var<storage, read_write> y: array<{ty}>;");
        let _ = writeln!(w, "struct Meta {{ w: array<vec4<u32>, 3> }};");
        let _ = writeln!(w, "@group(0) @binding({}) var<uniform> prm: Meta;", b + 1);
        let _ = writeln!(w, "var<workgroup> rmax: array<f32, {wg}>;");
        let _ = writeln!(w, "var<workgroup> rsum: array<f32, {wg}>;");
        w.push_str("fn ninf() -> f32 { return bitcast<f32>(0xff800000u); }\n");
        if self.vec4 {
            w.push_str(
                "fn hmax(q: vec4<f32>) -> f32 { return max(max(q.x, q.y), max(q.z, q.w)); }\n",
            );
            w.push_str("fn hsum(q: vec4<f32>) -> f32 { return (q.x + q.y) + (q.z + q.w); }\n");
        } else {
            w.push_str(
                "fn hmax(q: f32) -> f32 { return q; }\nfn hsum(q: f32) -> f32 { return q; }\n",
            );
        }
        if self.mask {
            // The mask's elements of unit `k` (from the row's base `mb`, key stride `ks`).
            if self.vec4 {
                w.push_str("fn bias(mb: u32, ks: u32, k: u32) -> vec4<f32> {\n  let j = mb + 4u * k * ks;\n  return vec4<f32>(mk[j], mk[j + ks], mk[j + 2u * ks], mk[j + 3u * ks]);\n}\n");
            } else {
                w.push_str(
                    "fn bias(mb: u32, ks: u32, k: u32) -> f32 { return mk[mb + k * ks]; }\n",
                );
            }
        }
        let _ = write!(
            w,
            "@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {{
  let row0 = (wid.x + wid.y * nwg.x) * {rpw}u + tid / {seg}u;
  let live = row0 < prm.w[0].x;
  let row = select(0u, row0, live);
  let n = select(0u, prm.w[0].y, live);
  let lane = tid % {seg}u;
  let first = tid - lane;
  let scale = bitcast<f32>(prm.w[0].z);
  let xb = prm.w[0].w + row * prm.w[0].y;
",
            rpw = wg / seg
        );
        if self.mask {
            w.push_str(
                "  let d1 = prm.w[1].z; let d2 = prm.w[1].w;
  let i2 = row % d2; let rest = row / d2;
  let mb = prm.w[1].x + (rest / d1) * prm.w[2].x + (rest % d1) * prm.w[2].y + i2 * prm.w[2].z;
  let ks = prm.w[1].y;
",
            );
        }
        // Loads first (independent, in flight together), then scale and bias.
        for i in 0..c {
            let _ = writeln!(
                w,
                "  let k{i} = lane + {}u;\n  var x{i} = {ty}(ninf());\n  if (k{i} < n) {{ x{i} = x[xb + k{i}]; }}",
                i * seg
            );
        }
        for i in 0..c {
            let add = if self.mask { format!(" + bias(mb, ks, k{i})") } else { String::new() };
            let _ = writeln!(w, "  if (k{i} < n) {{ x{i} = x{i} * scale{add}; }}");
        }
        let maxes: Vec<String> = (0..c).map(|i| format!("hmax(x{i})")).collect();
        let lm = maxes.iter().skip(1).fold(maxes[0].clone(), |a, b| format!("max({a}, {b})"));
        let _ = write!(
            w,
            "  rmax[tid] = {lm};
  workgroupBarrier();
  var m = rmax[first];
  for (var j = 1u; j < {seg}u; j = j + 1u) {{ m = max(m, rmax[first + j]); }}
  // Every key masked: zeros (x - m would be NaN).
  let dead = bitcast<u32>(m) == 0xff800000u;
  let mm = select(m, 0.0, dead);
"
        );
        for i in 0..c {
            let _ = writeln!(w, "  let e{i} = exp(x{i} - mm);");
        }
        let sums: Vec<String> = (0..c).map(|i| format!("hsum(e{i})")).collect();
        let _ = write!(
            w,
            "  rsum[tid] = {};
  workgroupBarrier();
  var s = rsum[first];
  for (var j = 1u; j < {seg}u; j = j + 1u) {{ s = s + rsum[first + j]; }}
  let inv = select(1.0 / s, 0.0, dead);
",
            sums.join(" + ")
        );
        for i in 0..c {
            let _ = writeln!(w, "  if (k{i} < n) {{ y[row * prm.w[0].y + k{i}] = e{i} * inv; }}");
        }
        w.push_str("}\n");
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_bert_rows_and_refuses_long_ones() {
        assert_eq!(MaskedSoftmaxSpec::plan(32, None), Some((4, 8)));
        assert_eq!(MaskedSoftmaxSpec::plan(32, Some(8)), Some((8, 4)));
        assert_eq!(MaskedSoftmaxSpec::plan(7, None), Some((1, 7)));
        assert_eq!(MaskedSoftmaxSpec::plan(1024, None), Some((128, 8)));
        assert_eq!(MaskedSoftmaxSpec::plan(1025, None), None);
        // A forced seg too small for the row is refused, not truncated.
        assert_eq!(MaskedSoftmaxSpec::plan(100, Some(2)), None);
    }

    #[cfg(feature = "validate")]
    #[test]
    fn every_variant_validates_and_translates_to_msl() {
        for vec4 in [false, true] {
            for mask in [false, true] {
                for (seg, chunks) in [(1, 1), (4, 8), (8, 3), (128, 8)] {
                    let spec = MaskedSoftmaxSpec { vec4, mask, seg, chunks };
                    let src = spec.render();
                    crate::validate::wgsl_to_msl(&src)
                        .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                }
            }
        }
    }
}
