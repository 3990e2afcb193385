//! Generation 3's workgroup-memory budget and its stores through workgroup memory: how many
//! bytes a tune's slabs and store scratch take ([`shared_bytes`], kept within
//! [`COOP_SHARED_BUDGET`] so two workgroups fit on an NVIDIA SM), and the two stores that are
//! not a plain `coopStoreT` to the output: the row-scratch store (f16 output or an epilogue)
//! and the scratch-free in-place store (`ns1`). Split from `matmul_coop_family.rs`, which
//! renders the rest of the kernel.

use crate::matmul_coop::CoopMatmulSpec;
use crate::matmul_coop_family::block;
use mpsrt_core::DType;
use std::fmt::Write as _;

/// Workgroup-memory bytes of a generation-3 kernel.
pub(crate) fn shared_bytes(spec: &CoopMatmulSpec) -> u32 {
    slab_bytes(spec) + scratch_bytes(spec, row_tiles(spec)) + 1024 * u32::from(spec.tune.xs)
}

/// The `xs` occupancy probe's declaration (`decl`) or its use at the top of the kernel: a
/// store and a load the driver cannot drop (the condition is a run-time value) on a path that
/// never runs (no product has `K == 0xffffffff`). Empty without `xs`.
pub(crate) fn extra_shared(spec: &CoopMatmulSpec, decl: bool) -> String {
    let words = 256 * u32::from(spec.tune.xs);
    match (words, decl) {
        (0, _) => String::new(),
        (n, true) => format!("var<workgroup> Xs: array<u32, {n}>;\n"),
        (n, false) => {
            // A vector's constructor splats a scalar of its own type only.
            let ty = out_type(spec);
            let el = if spec.out_f16 && vector_out(spec) { "f16" } else { "f32" };
            format!("  if (K == 0xffffffffu) {{ Xs[tid % {n}u] = tid; out[0] = {ty}({el}(Xs[(tid + 1u) % {n}u])); }}\n")
        }
    }
}

/// Bytes of the K slabs (both stages with `db`).
fn slab_bytes(spec: &CoopMatmulSpec) -> u32 {
    let (bm, bn, _) = block(spec);
    let t = &spec.tune;
    let (bk, pad) = (u32::from(t.bk), u32::from(t.pad));
    let stages = if t.db { 2 } else { 1 };
    // `da`: A is read from the storage buffer (8 halves keep the slab's name declared).
    let a = if direct_a(spec) { 8 } else { stages * bm * (bk + u32::from(t.a_pad())) };
    2 * (a + stages * bk * (bn + pad))
}

/// `da1` applies: a whole-block kernel (`aligned`) with both operands row-major and 16-byte
/// aligned, one slab, no register prefetch — its A fragments are `coopLoadT`s from the
/// storage buffer (the A slab, its staging stores and their share of the barrier go away;
/// each A element is read by the `wn` subgroups of a row, from L1 after the first).
pub(crate) fn direct_a(spec: &CoopMatmulSpec) -> bool {
    let t = &spec.tune;
    t.da && spec.aligned && spec.vec_a && spec.vec_b && !t.db && !t.rp && !t.dg && spec.variant == 3
}

/// Bytes of the store scratch with `row` tiles per subgroup (none for `ns1` kernels of whole
/// blocks that store f32 straight to the output).
fn scratch_bytes(spec: &CoopMatmulSpec, row: u32) -> u32 {
    if no_scratch(spec) {
        return 0;
    }
    let t = &spec.tune;
    let acc = if spec.acc == DType::F32 { 4 } else { 2 };
    u32::from(t.wm) * u32::from(t.wn) * row * spec.size * spec.size * acc
}

/// `ns1` applies: whole blocks, f32 accumulators stored straight to an f32 output, no
/// epilogue — `alpha != 1` is applied in place after the stores, so no scratch is declared.
pub(crate) fn no_scratch(spec: &CoopMatmulSpec) -> bool {
    spec.tune.ns && spec.aligned && !rows_store(spec) && spec.acc == DType::F32
}

/// Workgroup memory per workgroup that keeps two workgroups of a 4×4-tile kernel on an SM on
/// NVIDIA's Vulkan driver (H200, 8th session): the default kernel's 23040 bytes ran at 188
/// TFLOP/s at 4096³ while every kernel past 25 KB (two slabs, K 64, the 4-tile f16 store
/// scratch: 34.5 KB) ran at half or less with no register spill (`COOP_STATS`), i.e. one
/// workgroup per SM.
pub const COOP_SHARED_BUDGET: u32 = 23040;

/// The workgroup-memory budget a tune's store scratch is sized for: [`COOP_SHARED_BUDGET`]
/// (two workgroups per SM), or 15360 bytes with `oc3` (three).
fn budget(spec: &CoopMatmulSpec) -> u32 {
    if spec.tune.oc == 3 {
        15360
    } else {
        COOP_SHARED_BUDGET
    }
}

/// Whether the kernel stores through the row-of-tiles scratch (f16 output, an epilogue, or an
/// f32 output with `rs1`) rather than `coopStoreT` straight to an f32 output.
pub(crate) fn rows_store(spec: &CoopMatmulSpec) -> bool {
    spec.out_f16 || spec.epi.any() || (spec.tune.rs && spec.variant == 3)
}

/// The element type the output is bound as: four outputs per element with [`vector_out`].
pub(crate) fn out_type(spec: &CoopMatmulSpec) -> &'static str {
    match (spec.out_f16, vector_out(spec)) {
        (true, true) => "vec4<f16>",
        (false, true) => "vec4<f32>",
        (true, false) => "f16",
        (false, false) => "f32",
    }
}

/// `ov1` applies: an f16 output of whole blocks (`aligned`: N a multiple of the block, so every
/// run of 4 outputs is 8-byte aligned) stored 4 halves per store (`out` bound as
/// `array<vec4<f16>>`), with no bounds checks; with `rs1` an f32 output likewise, 16 bytes per
/// store.
pub(crate) fn vector_out(spec: &CoopMatmulSpec) -> bool {
    spec.tune.ov && (spec.out_f16 || spec.tune.rs) && spec.aligned && spec.variant == 3
}

/// Tiles per scratch row of the f16 / epilogue store: the subgroup's row of `tn` tiles, in
/// groups of at most 4 (8 tiles would push 4×8 tunes past 48 KiB), and fewer where the
/// scratch would push the kernel past [`COOP_SHARED_BUDGET`] (4×4 tiles: one tile per group,
/// 23040 bytes as with the f32 store, instead of 34.5 KB, which halved 4096³ with the f16
/// store: one workgroup per SM).
pub(crate) fn row_tiles(spec: &CoopMatmulSpec) -> u32 {
    let tn = u32::from(spec.tune.tn);
    if !rows_store(spec) {
        return 1;
    }
    let slabs = slab_bytes(spec);
    [4, 2, 1]
        .into_iter()
        .find(|&r| r <= tn && slabs + scratch_bytes(spec, r) <= budget(spec))
        .unwrap_or(1)
}

/// The store through the scratch (f16 output, an epilogue, or `rs1`): for each of the
/// subgroup's `tm` rows of tiles, the accumulators go (at most 4 at a time, [`row_tiles`]) to
/// the subgroup's scratch as one row-major `s × cw·s` block (`coopStoreT` with stride `cw·s`),
/// then each lane applies the epilogue (`alpha·acc + beta·C + res`, activation) to its
/// elements and stores the in-bounds ones, rounded to f16 for an f16 output (runs of `cw·s`
/// consecutive elements per output row). Two barriers per group of tiles.
pub(crate) fn store_rows(w: &mut String, spec: &CoopMatmulSpec, tm: u32, tn: u32) {
    let (s, sg) = (spec.size, spec.subgroup);
    let cw = row_tiles(spec);
    let row = cw * s;
    w.push_str("  let alpha = bitcast<f32>(mw(10u));\n  let obase = wid.z * Mr * N;\n");
    if spec.epi.c {
        w.push_str("  let beta = bitcast<f32>(mw(11u));\n");
    }
    let mut val = String::from("alpha * f32(Cs[cs + e])");
    if spec.epi.c {
        val.push_str(" + beta * cin[u32(mi(12u) + i32(m) * mi(13u) + i32(n) * mi(14u))]");
    }
    if spec.epi.res {
        val.push_str(" + res[obase + m * N + n]");
    }
    if spec.epi.act != crate::matmul::MatmulAct::None {
        val = format!("act(vec4<f32>({val})).x");
    }
    if spec.out_f16 {
        val = format!("f16({val})");
    }
    let _ = writeln!(w, "  let cs = sg * {}u;", row * s);
    // `sb1`: the scratch rows are this subgroup's own.
    let bar = if spec.tune.sb { "subgroupBarrier" } else { "workgroupBarrier" };
    for i in 0..tm {
        for g in (0..tn).step_by(cw as usize) {
            for j in g..g + cw {
                // The index is bound first (naga's SPIR-V writer needs the pointer's index
                // cached).
                let _ = writeln!(
                    w,
                    "  let q{i}_{j} = cs + {}u;\n  coopStoreT(c{i}_{j}, &Cs[q{i}_{j}], {row}u);",
                    (j - g) * s
                );
            }
            let _ = writeln!(w, "  {bar}();");
            if vector_out(spec) {
                // Four consecutive outputs of one row per lane and store (whole blocks).
                let _ = writeln!(
                    w,
                    "  for (var e4 = lane * 4u; e4 < {}u; e4 = e4 + {}u) {{",
                    row * s,
                    4 * sg
                );
                let _ = writeln!(
                    w,
                    "    let m = m0 + sm + {}u + e4 / {row}u; let n4 = n0 + sn + {}u + e4 % {row}u;\n    var v = {}();",
                    i * s,
                    g * s,
                    out_type(spec)
                );
                for (t, c) in ["x", "y", "z", "w"].iter().enumerate() {
                    let _ = writeln!(
                        w,
                        "    {{ let e = e4 + {t}u; let n = n4 + {t}u; v.{c} = {val}; }}"
                    );
                }
                let _ = writeln!(w, "    out[(obase + m * N + n4) >> 2u] = v;\n  }}\n  {bar}();");
                continue;
            }
            let _ = writeln!(w, "  for (var e = lane; e < {}u; e = e + {sg}u) {{", row * s);
            let _ = writeln!(
                w,
                "    let m = m0 + sm + {}u + e / {row}u; let n = n0 + sn + {}u + e % {row}u;",
                i * s,
                g * s
            );
            let _ = writeln!(w, "    if (m < Mr && n < N) {{ out[obase + m * N + n] = {val}; }}");
            let _ = writeln!(w, "  }}\n  {bar}();");
        }
    }
}

/// The `ns1` store of whole blocks: every tile `coopStoreT` straight to the f32 output; with
/// `alpha != 1` (uniform) each subgroup then scales its own tiles in place after a storage
/// barrier (no workgroup scratch, so two-slab K-16 kernels stay within
/// [`COOP_SHARED_BUDGET`]).
pub(crate) fn store_direct_in_place(w: &mut String, tm: u32, tn: u32, s: u32, sg: u32) {
    w.push_str("  let alpha = bitcast<f32>(mw(10u));\n  let obase = wid.z * Mr * N;\n");
    for i in 0..tm {
        for j in 0..tn {
            let _ = writeln!(
                w,
                "  let o{i}_{j} = obase + (m0 + sm + {}u) * N + n0 + sn + {}u;\n  coopStoreT(c{i}_{j}, &out[o{i}_{j}], N);",
                i * s,
                j * s
            );
        }
    }
    w.push_str("  if (alpha != 1.0) {\n    storageBarrier();\n");
    let _ = writeln!(w, "    for (var e = lane; e < {}u; e = e + {sg}u) {{", s * s);
    let _ = writeln!(w, "      let r = (e / {s}u) * N + e % {s}u;");
    for i in 0..tm {
        for j in 0..tn {
            let _ = writeln!(w, "      out[o{i}_{j} + r] = alpha * out[o{i}_{j} + r];");
        }
    }
    w.push_str("    }\n  }\n");
}
