//! Winograd F(m×m, 3×3) convolution kernels (Lavin & Gray, 2015), m = 2 or 4, for 3×3,
//! stride-1, undilated, ungrouped convs: each m×m output tile is computed from an α×α input
//! patch (α = m + 2) with α² multiplies per (input, output) channel pair instead of 9·m², so
//! the GEMM work drops 2.25× (F(2,3)) or 4× (F(4,3)) at the price of three bandwidth-bound
//! transform passes (F(4,3)'s transformed input is 2.25× the input, F(2,3)'s 4×).
//!
//! The launch (`mpsrt-tensor/src/gpu/winograd.rs`) runs:
//! 1. `weights`: `U[ξ, oc, c] = (G g Gᵀ)[ξ]` for each 3×3 filter `g`;
//! 2. `input`: `V[ξ, c, t] = (Bᵀ d B)[ξ]` for each channel and α×α patch `d` of tile `t`
//!    (`t` over N·TH·TW, zeros outside the input: the padding);
//! 3. α² independent GEMMs `M[ξ] = U[ξ] · V[ξ]` — one batched call of the tiled matmul;
//! 4. `output` (per epilogue): `Y = Aᵀ M A` per (channel, tile), plus the bias, a residual and
//!    the activation, stored NCHW with the map's edges cut off.
//!
//! Every pass is one thread per (oc, c) filter, (c, tile) patch or (oc, tile); the transforms
//! are fully unrolled products with the matrices' constants (zeros skipped), all in registers.
//! The U/V/M layouts put the tile (or input-channel) index innermost, so the transforms' stores
//! and loads are coalesced and the GEMM sees plain row-major matrices. Geometry is read from
//! the metadata (one pipeline per m for every shape). Meta words: 0 threads, 1 C, 2 H,
//! 3 activation p0, 4 threads per grid row, 5 W, 6 OC, 7 OH, 8 OW, 9 TH, 10 TW, 11 top pad,
//! 12 left pad, 13 input offset (x, w or bias, in floats), 14 residual offset, 15 activation p1.

use crate::matmul::MatmulAct;
use std::fmt::Write;

/// F(2,3): Bᵀ (4×4), G (4×3), Aᵀ (2×4).
const BT2: [&[f64]; 4] =
    [&[1., 0., -1., 0.], &[0., 1., 1., 0.], &[0., -1., 1., 0.], &[0., 1., 0., -1.]];
const G2: [&[f64]; 4] = [&[1., 0., 0.], &[0.5, 0.5, 0.5], &[0.5, -0.5, 0.5], &[0., 0., 1.]];
const AT2: [&[f64]; 2] = [&[1., 1., 1., 0.], &[0., 1., -1., -1.]];

/// F(4,3) with interpolation points 0, ±1, ±2, ∞: Bᵀ (6×6), G (6×3), Aᵀ (4×6).
const BT4: [&[f64]; 6] = [
    &[4., 0., -5., 0., 1., 0.],
    &[0., -4., -4., 1., 1., 0.],
    &[0., 4., -4., -1., 1., 0.],
    &[0., -2., -1., 2., 1., 0.],
    &[0., 2., -1., -2., 1., 0.],
    &[0., 4., 0., -5., 0., 1.],
];
const G4: [&[f64]; 6] = [
    &[0.25, 0., 0.],
    &[-1. / 6., -1. / 6., -1. / 6.],
    &[-1. / 6., 1. / 6., -1. / 6.],
    &[1. / 24., 1. / 12., 1. / 6.],
    &[1. / 24., -1. / 12., 1. / 6.],
    &[0., 0., 1.],
];
const AT4: [&[f64]; 4] = [
    &[1., 1., 1., 1., 1., 0.],
    &[0., 1., -1., 2., -2., 0.],
    &[0., 1., 1., 4., 4., 0.],
    &[0., 1., -1., 8., -8., 1.],
];

/// A transform matrix, row by row.
type Matrix = &'static [&'static [f64]];

/// The transform matrices of F(m, 3): (Bᵀ, G, Aᵀ).
fn matrices(m: u32) -> (Matrix, Matrix, Matrix) {
    if m == 4 {
        (&BT4, &G4, &AT4)
    } else {
        (&BT2, &G2, &AT2)
    }
}

/// `Σ coeffs[i] · name(i)` as WGSL, zeros skipped, ±1 without a multiply.
fn lin(coeffs: &[f64], name: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for (i, &c) in coeffs.iter().enumerate() {
        if c == 0.0 {
            continue;
        }
        let sign = if c < 0.0 { "-" } else { "+" };
        let a = c.abs();
        let term = if a == 1.0 { name(i) } else { format!("{a:?} * {}", name(i)) };
        if s.is_empty() {
            s = if c < 0.0 { format!("-{term}") } else { term };
        } else {
            let _ = write!(s, " {sign} {term}");
        }
    }
    if s.is_empty() {
        "0.0".into()
    } else {
        s
    }
}

/// `R = L · X · Lᵀ` on scalars `x{i}_{j}` (rows × cols), declared as `let r{a}_{b}`, through
/// `t{a}_{j}`; `right` is the matrix applied on the right (`Xᵀ`'s side), `L` on the left.
fn sandwich(s: &mut String, left: &[&[f64]], right: &[&[f64]], x: &str, r: &str, cols: usize) {
    for (a, la) in left.iter().enumerate() {
        for j in 0..cols {
            let _ = writeln!(s, "  let t{a}_{j} = {};", lin(la, |i| format!("{x}{i}_{j}")));
        }
    }
    for a in 0..left.len() {
        for (b, rb) in right.iter().enumerate() {
            let _ = writeln!(s, "  let {r}{a}_{b} = {};", lin(rb, |j| format!("t{a}_{j}")));
        }
    }
}

const HEADER: &str = "struct Meta { w: array<vec4<u32>, 4> };
fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }
";

fn bindings(s: &mut String, bufs: &[(&str, &str)]) {
    for (i, (name, access)) in bufs.iter().enumerate() {
        let _ = writeln!(s, "@group(0) @binding({i}) var<storage, {access}> {name}: array<f32>;");
    }
    let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
    s.push_str(HEADER);
}

const PROLOGUE: &str = "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let e = gid.x + gid.y * mw(4u);
  let total = mw(0u);
  if (e >= total) { return; }
";

/// The weight transform of F(`m`, 3): bindings `src` (OIHW weights), `dst` (`[α², OC, C]`).
pub fn winograd_weights_kernel(m: u32) -> String {
    let (_, g, _) = matrices(m);
    let mut s = format!(
        "// generated by mpsrt-kernels: winograd F({m}x{m},3x3) weights: one thread per (oc, c) filter, G g Gᵀ unrolled in registers\n"
    );
    bindings(&mut s, &[("src", "read"), ("dst", "read_write")]);
    s.push_str(PROLOGUE);
    s.push_str("  let b = mw(13u) + e * 9u;\n");
    for i in 0..3 {
        for j in 0..3 {
            let _ = writeln!(s, "  let g{i}_{j} = src[b + {}u];", i * 3 + j);
        }
    }
    sandwich(&mut s, g, g, "g", "u", 3);
    let alpha = g.len();
    for a in 0..alpha {
        for b in 0..alpha {
            let _ = writeln!(s, "  dst[{}u * total + e] = u{a}_{b};", a * alpha + b);
        }
    }
    s.push_str("}\n");
    s
}

/// The input transform of F(`m`, 3): bindings `src` (NCHW input), `dst` (`[α², C, T]`).
pub fn winograd_input_kernel(m: u32) -> String {
    let (bt, _, _) = matrices(m);
    let alpha = bt.len();
    let mut s = format!(
        "// generated by mpsrt-kernels: winograd F({m}x{m},3x3) input: one thread per (c, tile) patch, Bᵀ d B unrolled in registers, coalesced V stores\n"
    );
    bindings(&mut s, &[("src", "read"), ("dst", "read_write")]);
    s.push_str(PROLOGUE);
    s.push_str(
        "  let C = mw(1u); let H = mw(2u); let W = mw(5u); let TH = mw(9u); let TW = mw(10u);
  let T = total / C;
  let c = e / T; let t = e % T;
  let img = t / (TH * TW); let r = t % (TH * TW);
",
    );
    let _ = writeln!(
        s,
        "  let ybase = i32((r / TW) * {m}u) - i32(mw(11u));\n  let xbase = i32((r % TW) * {m}u) - i32(mw(12u));"
    );
    s.push_str("  let base = mw(13u) + (img * C + c) * H * W;\n");
    for i in 0..alpha {
        let _ = writeln!(s, "  let y{i} = ybase + {i}; let x{i} = xbase + {i};");
    }
    for i in 0..alpha {
        for j in 0..alpha {
            let _ = writeln!(
                s,
                "  var d{i}_{j} = 0.0; if (u32(y{i}) < H && u32(x{j}) < W) {{ d{i}_{j} = src[base + u32(y{i}) * W + u32(x{j})]; }}"
            );
        }
    }
    sandwich(&mut s, bt, bt, "d", "v", alpha);
    for a in 0..alpha {
        for b in 0..alpha {
            let _ = writeln!(s, "  dst[{}u * total + e] = v{a}_{b};", a * alpha + b);
        }
    }
    s.push_str("}\n");
    s
}

/// The output transform of F(`m`, 3) with its epilogue: bindings `m` (`[α², OC, T]`), then
/// `bias` (`has_bias`), `res` (`has_res`, NCHW like the output), `out`, and the metadata.
pub fn winograd_output_kernel(m: u32, has_bias: bool, has_res: bool, act: MatmulAct) -> String {
    let (_, _, at) = matrices(m);
    let alpha = at[0].len();
    let mut s = format!(
        "// generated by mpsrt-kernels: winograd F({m}x{m},3x3) output bias={has_bias} res={has_res} {act:?}\n// One thread per (oc, tile): Aᵀ M A unrolled in registers, epilogue, edge-clipped NCHW stores.\n"
    );
    let mut bufs = vec![("mx", "read")];
    if has_bias {
        bufs.push(("bias", "read"));
    }
    if has_res {
        bufs.push(("res", "read"));
    }
    bufs.push(("out", "read_write"));
    bindings(&mut s, &bufs);
    s.push_str(act.wgsl());
    s.push_str(PROLOGUE);
    s.push_str(
        "  let OC = mw(6u); let OH = mw(7u); let OW = mw(8u); let TH = mw(9u); let TW = mw(10u);
  let T = total / OC;
  let oc = e / T; let t = e % T;
  let img = t / (TH * TW); let r = t % (TH * TW);
",
    );
    let _ = writeln!(s, "  let oy = (r / TW) * {m}u; let ox = (r % TW) * {m}u;");
    for a in 0..alpha {
        for b in 0..alpha {
            let _ = writeln!(s, "  let q{a}_{b} = mx[{}u * total + e];", a * alpha + b);
        }
    }
    sandwich(&mut s, at, at, "q", "y", alpha);
    s.push_str(if has_bias { "  let bv = bias[mw(13u) + oc];\n" } else { "  let bv = 0.0;\n" });
    s.push_str("  let ob = (img * OC + oc) * OH * OW;\n");
    for a in 0..m {
        for b in 0..m {
            let _ = writeln!(
                s,
                "  if (oy + {a}u < OH && ox + {b}u < OW) {{ let o = ob + (oy + {a}u) * OW + ox + {b}u; var v = y{a}_{b} + bv;"
            );
            if has_res {
                s.push_str("    v = v + res[mw(14u) + o];\n");
            }
            s.push_str("    out[o] = act(vec4<f32>(v)).x;\n  }\n");
        }
    }
    s.push_str("}\n");
    s
}

/// Tiles per dimension of an `oh × ow` output map (m×m outputs each).
pub fn winograd_tiles(m: u32, oh: u32, ow: u32) -> (u32, u32) {
    (oh.div_ceil(m), ow.div_ceil(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn winograd_kernels_validate_and_translate_to_msl() {
        for m in [2, 4] {
            for src in [winograd_weights_kernel(m), winograd_input_kernel(m)] {
                crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
            }
            for (b, r, act) in [
                (false, false, MatmulAct::None),
                (true, false, MatmulAct::Relu),
                (true, true, MatmulAct::LeakyRelu),
                (false, true, MatmulAct::Clip),
            ] {
                let src = winograd_output_kernel(m, b, r, act);
                crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
            }
        }
    }

    /// The matrices themselves: the 1-D F(m, 3) identity `Aᵀ[(G g) ⊙ (Bᵀ d)] = correlation
    /// of d with g`, checked in f64 on a ramp.
    #[test]
    fn transform_matrices_compute_a_correlation() {
        for m in [2usize, 4] {
            let (bt, g, at) = matrices(m as u32);
            let alpha = m + 2;
            let d: Vec<f64> = (0..alpha).map(|i| (i * i) as f64 * 0.5 - 1.0).collect();
            let f = [0.3, -1.2, 2.0];
            let gg: Vec<f64> = (0..alpha).map(|a| (0..3).map(|i| g[a][i] * f[i]).sum()).collect();
            let bd: Vec<f64> =
                (0..alpha).map(|a| (0..alpha).map(|i| bt[a][i] * d[i]).sum()).collect();
            for (r, row) in at.iter().enumerate() {
                let y: f64 = (0..alpha).map(|a| row[a] * gg[a] * bd[a]).sum();
                let want: f64 = (0..3).map(|k| d[r + k] * f[k]).sum();
                assert!((y - want).abs() < 1e-9, "F({m},3) row {r}: {y} vs {want}");
            }
        }
    }
}
