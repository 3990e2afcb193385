//! Generation 3 of the cooperative-matrix f16 GEMM: one renderer for a family of kernels whose
//! shape and technique are parameters ([`CoopTune`]), so one GPU session can time them all
//! (`bench_coop_sweep`) and the planner can keep the winner per shape.
//!
//! Parameters: the workgroup's grid of subgroups (`wm × wn`), cooperative tiles per subgroup
//! (`tm × tn`), K per step (`bk`), slab row padding (`pad` halves, against bank conflicts of
//! the matrix loads), one or two slab buffers (`db`: with two, the next slab's 16-byte global
//! loads are in registers while the current slab is multiplied), a bounds-check-free
//! specialization for interior workgroups (`fi`: a workgroup-uniform branch; edge workgroups
//! keep the checked loop), and direct loads (`dg`): interior workgroups of row-major, 16-byte
//! aligned operands read their cooperative tiles straight from the storage buffers (no
//! workgroup staging, no barriers; with `db` the next step's tiles are loaded before the
//! current step's products). Every variant stores interior tiles with `coopStoreT` straight to
//! the output (f32 accumulation, `alpha == 1`); edge tiles go through a per-subgroup scratch
//! with bounds checks.
//!
//! The text form (`w2x2_t4x4_k32_p8_db0_fi1_dg0`, [`CoopTune::name`] / [`CoopTune::parse`])
//! is what `MPSRT_COOP_VARIANT` takes.

use crate::matmul_coop::CoopMatmulSpec;
pub use crate::matmul_coop_tune::CoopTune;
use mpsrt_core::DType;
use std::fmt::Write as _;

/// Shapes derived from a spec and its tune.
pub(crate) fn block(spec: &CoopMatmulSpec) -> (u32, u32, u32) {
    let t = &spec.tune;
    let s = spec.size;
    (
        u32::from(t.wm) * u32::from(t.tm) * s,
        u32::from(t.wn) * u32::from(t.tn) * s,
        u32::from(t.wm) * u32::from(t.wn) * spec.subgroup,
    )
}

/// Workgroup-memory bytes of a generation-3 kernel.
pub(crate) fn shared_bytes(spec: &CoopMatmulSpec) -> u32 {
    slab_bytes(spec) + scratch_bytes(spec, row_tiles(spec))
}

/// Bytes of the K slabs (both stages with `db`).
fn slab_bytes(spec: &CoopMatmulSpec) -> u32 {
    let (bm, bn, _) = block(spec);
    let t = &spec.tune;
    let (bk, pad) = (u32::from(t.bk), u32::from(t.pad));
    let stages = if t.db { 2 } else { 1 };
    2 * stages * (bm * (bk + pad) + bk * (bn + pad))
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
fn no_scratch(spec: &CoopMatmulSpec) -> bool {
    spec.tune.ns && spec.aligned && !rows_store(spec) && spec.acc == DType::F32
}

/// Workgroup memory per workgroup that keeps two workgroups of a 4×4-tile kernel on an SM on
/// NVIDIA's Vulkan driver (H200, 8th session): the default kernel's 23040 bytes ran at 188
/// TFLOP/s at 4096³ while every kernel past 25 KB (two slabs, K 64, the 4-tile f16 store
/// scratch: 34.5 KB) ran at half or less with no register spill (`COOP_STATS`), i.e. one
/// workgroup per SM.
pub const COOP_SHARED_BUDGET: u32 = 23040;

/// Whether the kernel stores through the row-of-tiles scratch (f16 output or an epilogue)
/// rather than `coopStoreT` straight to an f32 output.
fn rows_store(spec: &CoopMatmulSpec) -> bool {
    spec.out_f16 || spec.epi.any()
}

/// Tiles per scratch row of the f16 / epilogue store: the subgroup's row of `tn` tiles, in
/// groups of at most 4 (8 tiles would push 4×8 tunes past 48 KiB), and fewer where the
/// scratch would push the kernel past [`COOP_SHARED_BUDGET`] (4×4 tiles: one tile per group,
/// 23040 bytes as with the f32 store, instead of 34.5 KB, which halved 4096³ with the f16
/// store: one workgroup per SM).
fn row_tiles(spec: &CoopMatmulSpec) -> u32 {
    let tn = u32::from(spec.tune.tn);
    if !rows_store(spec) {
        return 1;
    }
    let slabs = slab_bytes(spec);
    [4, 2, 1]
        .into_iter()
        .find(|&r| r <= tn && slabs + scratch_bytes(spec, r) <= COOP_SHARED_BUDGET)
        .unwrap_or(1)
}

/// Render a generation-3 kernel (`spec.variant == 3`, `spec.tune`). Direct loads need both
/// operands on the vector paths (`vec_a && vec_b`: row-major, 16-byte aligned); without them
/// `dg` is ignored.
pub(crate) fn render(spec: &CoopMatmulSpec) -> Result<String, String> {
    let t = spec.tune;
    t.check(spec.size)?;
    let s = spec.size;
    let sg = spec.subgroup;
    let (bm, bn, nt) = block(spec);
    let (tm, tn, wn) = (u32::from(t.tm), u32::from(t.tn), u32::from(t.wn));
    let (bk, pad) = (u32::from(t.bk), u32::from(t.pad));
    let dg = t.dg && spec.vec_a && spec.vec_b;
    // Direct loads read f16 elements; staging then runs on the scalar paths.
    let (va, vb) = (spec.vec_a && !dg, spec.vec_b && !dg);
    let acc = if spec.acc == DType::F32 { "f32" } else { "f16" };
    let (as_, bs_) = (bk + pad, bn + pad);
    let (a_stage, b_stage) = (bm * as_, bk * bs_);
    let stages = if t.db { 2 } else { 1 };
    // Vector-typed slabs for the operands staged 8 wide.
    let (vsa, vsb) = (if va { u32::from(t.vs) } else { 0 }, if vb { u32::from(t.vs) } else { 0 });
    let nb = spec.batch_dims;
    let h = crate::MATMUL_META_HEAD;
    let words = (h + 3 * nb).div_ceil(4);
    let mut w = String::with_capacity(16384);
    let _ = writeln!(
        w,
        "// generated by mpsrt-kernels: cooperative matmul generation 3 {} {spec:?}",
        t.name()
    );
    w.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
    let _ = writeln!(w, "struct Meta {{ w: array<vec4<u32>, {words}> }};");
    let wl = t.wl;
    if t.gl && !wl {
        // Eight halves in 16 bytes (array stride 16: every element 16-byte aligned).
        w.push_str("struct H8 { l: vec4<f16>, h: vec4<f16> };\n");
    }
    // 16-byte global loads (`gl`): the 8-wide staged operands bound as arrays of `H8`.
    let gl = t.gl && !wl;
    let ty = |v: bool| match (v, wl) {
        (true, false) if gl => "H8",
        (true, false) => "vec4<f16>",
        (false, false) => "f16",
        (true, true) => "vec4<u32>",
        (false, true) => "u32",
    };
    let _ = writeln!(w, "@group(0) @binding(0) var<storage, read> a: array<{}>;", ty(va));
    let _ = writeln!(w, "@group(0) @binding(1) var<storage, read> b: array<{}>;", ty(vb));
    let oty = if spec.out_f16 { "f16" } else { "f32" };
    // Bindings in order: a, b, [C], [residual], out, then the metadata.
    let mut bind = 2;
    for (on, name) in [(spec.epi.c, "cin"), (spec.epi.res, "res")] {
        if on {
            let _ =
                writeln!(w, "@group(0) @binding({bind}) var<storage, read> {name}: array<f32>;");
            bind += 1;
        }
    }
    let _ = writeln!(w, "@group(0) @binding({bind}) var<storage, read_write> out: array<{oty}>;");
    let _ = writeln!(w, "@group(0) @binding({}) var<uniform> M: Meta;", bind + 1);
    crate::matmul::meta_fns(&mut w, nb);
    if spec.epi.act != crate::matmul::MatmulAct::None {
        w.push_str(spec.epi.act.wgsl());
    }
    if wl {
        // Halves of word-typed operands (scalar staging paths).
        for (f, arr, v) in [("ha", "a", va), ("hb", "b", vb)] {
            if !v {
                let _ = writeln!(w, "fn {f}(i: u32) -> f16 {{ let v = unpack2x16float({arr}[i >> 1u]); return f16(select(v.x, v.y, (i & 1u) == 1u)); }}");
            }
        }
        let _ = writeln!(w, "var<workgroup> As: array<u32, {}>;", stages * a_stage / 2);
        let _ = writeln!(w, "var<workgroup> Bs: array<u32, {}>;", stages * b_stage / 2);
    } else {
        for (name, v, len) in [("As", vsa, stages * a_stage), ("Bs", vsb, stages * b_stage)] {
            let _ = match v {
                0 => writeln!(w, "var<workgroup> {name}: array<f16, {len}>;"),
                v => writeln!(w, "var<workgroup> {name}: array<vec{v}<f16>, {}>;", len / v),
            };
        }
    }
    if !no_scratch(spec) {
        let row = row_tiles(spec);
        let _ =
            writeln!(w, "var<workgroup> Cs: array<{acc}, {}>;", u32::from(t.wm) * wn * row * s * s);
    }
    w.push_str("var<workgroup> Wfull: u32;\n");
    let _ = writeln!(w, "@compute @workgroup_size({nt})");
    w.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32,\n");
    w.push_str("        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32");
    w.push_str(if t.sw != 0 {
        ",\n        @builtin(num_workgroups) nwg: vec3<u32>) {\n"
    } else {
        ") {\n"
    });
    w.push_str("  let Mr = mw(0u); let N = mw(1u); let K = mw(2u);\n  let bo = boffs(wid.z);\n");
    w.push_str("  let abase = mi(4u) + bo.x; let bbase = mi(5u) + bo.y;\n");
    w.push_str("  let sam = mi(6u); let sak = mi(7u); let sbk = mi(8u); let sbn = mi(9u);\n");
    if t.sw == 0 {
        let _ = writeln!(w, "  let m0 = wid.y * {bm}u; let n0 = wid.x * {bn}u;");
    } else {
        // Grouped order: block `pid` of a group of `sw` block-rows walks down, then right.
        let g = t.sw;
        let _ = writeln!(w, "  let pid = wid.y * nwg.x + wid.x; let gw = {g}u * nwg.x;");
        w.push_str("  let first = (pid / gw) * ");
        let _ = writeln!(w, "{g}u; let gsz = min(nwg.y - first, {g}u); let r = pid % gw;");
        let _ = writeln!(w, "  let m0 = (first + r % gsz) * {bm}u; let n0 = (r / gsz) * {bn}u;");
    }
    let _ =
        writeln!(w, "  let sm = (sg / {wn}u) * {}u; let sn = (sg % {wn}u) * {}u;", tm * s, tn * s);
    // Accumulators as separate named variables (never an indexed array of matrices).
    for i in 0..tm {
        for j in 0..tn {
            let _ = writeln!(w, "  var c{i}_{j} = coop_mat{s}x{s}<{acc}, C>();");
        }
    }
    let inside = format!("m0 + {bm}u <= Mr && n0 + {bn}u <= N");
    let pi = t.pi && !(t.fi || dg);
    let l = Loop {
        s,
        bm,
        bn,
        nt,
        tm,
        tn,
        bk,
        as_,
        bs_,
        a_stage,
        b_stage,
        va,
        vb,
        db: t.db,
        wl,
        pi,
        vsa,
        vsb,
        rp: t.rp,
        cl: t.cl,
        sp: t.sp,
        gl,
        fo: t.fo,
        rq: t.rq,
    };
    if (t.fi || dg) && spec.aligned {
        // Every workgroup is interior: the fast path alone, outside any branch.
        w.push_str("  {\n");
        w.push_str(&if dg { l.direct() } else { l.shared(false) });
        w.push_str("  }\n");
    } else if t.fi || dg {
        // naga's uniformity analysis counts `workgroup_id` as non-uniform, and cooperative
        // loads need uniform control flow: the branch reads its condition back through
        // `workgroupUniformLoad`, which makes it uniform by construction.
        let _ = writeln!(
            w,
            "  if (tid == 0u) {{ Wfull = select(0u, 1u, {inside} && K % {bk}u == 0u); }}"
        );
        w.push_str("  let full = workgroupUniformLoad(&Wfull) == 1u;\n");
        w.push_str("  if (full) {\n");
        w.push_str(&if dg { l.direct() } else { l.shared(false) });
        w.push_str("  } else {\n");
        w.push_str(&l.shared(true));
        w.push_str("  }\n");
    } else {
        if pi {
            let _ = writeln!(w, "  let full = {inside} && K % {bk}u == 0u;");
        }
        w.push_str(&l.shared(true));
    }
    if rows_store(spec) {
        store_rows(&mut w, spec, tm, tn);
    } else if no_scratch(spec) {
        store_direct_in_place(&mut w, tm, tn, spec.size, spec.subgroup);
    } else {
        crate::matmul_coop::store_epilogue(&mut w, spec.acc, &inside, tm, tn, s, sg, "_");
    }
    w.push_str("}\n");
    Ok(w)
}

/// The store through the scratch (f16 output or an epilogue): for each of the subgroup's `tm`
/// rows of tiles, the accumulators go (at most 4 at a time, [`row_tiles`]) to the subgroup's
/// scratch as one row-major `s × cw·s` block (`coopStoreT` with stride `cw·s`), then each
/// lane applies the epilogue (`alpha·acc + beta·C + res`, activation) to its elements and
/// stores the in-bounds ones, rounded to f16 for an f16 output (runs of `cw·s` consecutive
/// elements per output row). Two barriers per group of tiles.
fn store_rows(w: &mut String, spec: &CoopMatmulSpec, tm: u32, tn: u32) {
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
            w.push_str("  workgroupBarrier();\n");
            let _ = writeln!(w, "  for (var e = lane; e < {}u; e = e + {sg}u) {{", row * s);
            let _ = writeln!(
                w,
                "    let m = m0 + sm + {}u + e / {row}u; let n = n0 + sn + {}u + e % {row}u;",
                i * s,
                g * s
            );
            let _ = writeln!(w, "    if (m < Mr && n < N) {{ out[obase + m * N + n] = {val}; }}");
            w.push_str("  }\n  workgroupBarrier();\n");
        }
    }
}

/// The `ns1` store of whole blocks: every tile `coopStoreT` straight to the f32 output; with
/// `alpha != 1` (uniform) each subgroup then scales its own tiles in place after a storage
/// barrier (no workgroup scratch, so two-slab K-16 kernels stay within
/// [`COOP_SHARED_BUDGET`]).
fn store_direct_in_place(w: &mut String, tm: u32, tn: u32, s: u32, sg: u32) {
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

/// The K loop's geometry, shared by its renderings.
struct Loop {
    s: u32,
    bm: u32,
    bn: u32,
    nt: u32,
    tm: u32,
    tn: u32,
    bk: u32,
    as_: u32,
    bs_: u32,
    a_stage: u32,
    b_stage: u32,
    va: bool,
    vb: bool,
    db: bool,
    wl: bool,
    pi: bool,
    /// Halves per element of the A / B slab (0: `f16` slabs).
    vsa: u32,
    vsb: u32,
    /// One slab, next slab's vectors prefetched to registers.
    rp: bool,
    /// Checked loads as clamped address + select (no branch).
    cl: bool,
    /// With `db`: A's and B's next slabs prefetched around separate halves of the products.
    sp: bool,
    /// 8-wide staged operands read as one 16-byte `H8` element.
    gl: bool,
    /// Fragment order: a step's B tiles first, each A tile right before its products.
    fo: bool,
    /// With `db`: two register sets, global loads two steps ahead ([`Loop::ring`]).
    rq: bool,
}

impl Loop {
    /// Direct loads from the storage buffers (interior workgroups, K a multiple of `bk`, both
    /// operands row-major with 16-byte aligned rows). With `db`, each chunk of `bk` is loaded
    /// one chunk ahead into named matrices.
    fn direct(&self) -> String {
        let Loop { s, tm, tn, bk, .. } = *self;
        let mut c = String::new();
        c.push_str(
            "    let ga = u32(abase + i32(m0 + sm) * sam); let gb = u32(bbase + i32(n0 + sn));\n",
        );
        // Word-typed loads: indices and strides in u32 words (all even in halves here).
        let (sh, ws) = if self.wl { (" >> 1u", 2) } else { ("", 1) };
        let _ = writeln!(c, "    let lda = u32(sam); let ldb = u32(sbk); let lwa = lda / {ws}u; let lwb = ldb / {ws}u;");
        let loads = |c: &mut String, k: &str, pre: &str, decl: &str| {
            for i in 0..tm {
                let _ = writeln!(c, "    let ia{pre}{i} = (ga + {}u * lda + {k}){sh};", i * s);
                let _ = writeln!(c, "    {decl}{pre}a{i} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&a[ia{pre}{i}], lwa);");
            }
            for j in 0..tn {
                let _ = writeln!(c, "    let ib{pre}{j} = (gb + ({k}) * ldb + {}u){sh};", j * s);
                let _ = writeln!(c, "    {decl}{pre}b{j} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&b[ib{pre}{j}], lwb);");
            }
        };
        let mmas = |c: &mut String, pre: &str| {
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(
                        c,
                        "    c{i}_{j} = coopMultiplyAdd({pre}a{i}, {pre}b{j}, c{i}_{j});"
                    );
                }
            }
        };
        if self.db {
            // The current chunk's tiles (`bk / s` steps) in `var`s, the next chunk's loaded
            // before the current chunk's products.
            let steps: Vec<u32> = (0..bk).step_by(s as usize).collect();
            for &kk in &steps {
                loads(&mut c, &format!("{kk}u"), &format!("p{kk}"), "var ");
            }
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            // The last chunk reloads its own tiles rather than reading past K.
            let _ = writeln!(c, "    let kn = min(k0 + {bk}u, K - {bk}u);");
            for &kk in &steps {
                loads(&mut c, &format!("kn + {kk}u"), &format!("n{kk}"), "let ");
            }
            for &kk in &steps {
                mmas(&mut c, &format!("p{kk}"));
            }
            for &kk in &steps {
                for i in 0..tm {
                    let _ = writeln!(c, "    p{kk}a{i} = n{kk}a{i};");
                }
                for j in 0..tn {
                    let _ = writeln!(c, "    p{kk}b{j} = n{kk}b{j};");
                }
            }
            c.push_str("    }\n");
        } else {
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            for kk in (0..bk).step_by(s as usize) {
                let pre = format!("s{kk}");
                loads(&mut c, &format!("k0 + {kk}u"), &pre, "let ");
                mmas(&mut c, &pre);
            }
            c.push_str("    }\n");
        }
        c
    }

    /// The products of one staged slab at stage offsets `ab`/`bb`.
    fn products(&self) -> String {
        self.products_range(0, self.bk)
    }

    /// The products of the slab's K rows `k_lo..k_hi` (multiples of the tile size).
    fn products_range(&self, k_lo: u32, k_hi: u32) -> String {
        let Loop { s, tm, tn, as_, bs_, .. } = *self;
        // Word-typed or vector-typed slabs: indices and strides in slab elements (every
        // offset is a multiple of 8 halves).
        let unit = |v: u32| match (self.wl, v) {
            (true, _) => (" >> 1u", 2),
            (false, 0) => ("", 1),
            (false, v) => (if v == 2 { " >> 1u" } else { " >> 2u" }, v),
        };
        let ((sha, wa), (shb, wb)) = (unit(self.vsa), unit(self.vsb));
        let mut c = String::new();
        for kk in (k_lo..k_hi).step_by(s as usize) {
            let load_a = |c: &mut String, i: u32| {
                let _ = writeln!(c, "    let a{i}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&As[(ab + (sm + {}u) * {as_}u + {kk}u){sha}], {}u);", i * s, as_ / wa);
            };
            if !self.fo {
                (0..tm).for_each(|i| load_a(&mut c, i));
            }
            for j in 0..tn {
                let _ = writeln!(c, "    let b{j}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&Bs[(bb + {kk}u * {bs_}u + sn + {}u){shb}], {}u);", j * s, bs_ / wb);
            }
            for i in 0..tm {
                if self.fo {
                    // Each A tile loaded right before its row of products: one A fragment
                    // live beside the B fragments instead of all `tm`.
                    load_a(&mut c, i);
                }
                for j in 0..tn {
                    let _ = writeln!(
                        c,
                        "    c{i}_{j} = coopMultiplyAdd(a{i}_{kk}, b{j}_{kk}, c{i}_{j});"
                    );
                }
            }
        }
        c
    }

    /// Register names and type of the `t`-th vector a thread stages (8 halves: two
    /// `vec4<f16>`, or one `vec4<u32>` when word-typed).
    fn regs(&self, reg: &str, t: u32) -> Vec<(String, &'static str)> {
        if self.wl {
            vec![(format!("{reg}{t}w"), "vec4<u32>")]
        } else {
            vec![(format!("{reg}{t}l"), "vec4<f16>"), (format!("{reg}{t}h"), "vec4<f16>")]
        }
    }

    /// Global loads of slab `k0`: into registers `r*` on the vector paths (`to_regs`), or
    /// (scalar paths, and vector paths when `!to_regs`) straight into stage `st`. `checked`:
    /// bounds checks against M, N, K (edge workgroups).
    fn load(&self, k0: &str, st: &str, checked: bool, to_regs: bool) -> String {
        self.load_sel(k0, st, checked, to_regs, (true, true))
    }

    /// [`load`](Self::load) of the operands `sel` picks (A, B).
    fn load_sel(
        &self,
        k0: &str,
        st: &str,
        checked: bool,
        to_regs: bool,
        sel: (bool, bool),
    ) -> String {
        let Loop { bm, bn, nt, bk, as_, bs_, a_stage, b_stage, wl, .. } = *self;
        let mut c = String::new();
        let (q, qn) = (bk / 8, bn / 8);
        // Bounds checks, skipped at run time in interior blocks with `pi` (`full` is uniform).
        let guard = |cond: &str| {
            if self.pi {
                format!("(full || ({cond}))")
            } else {
                cond.to_string()
            }
        };
        // Vector index of element `x` (halves): 4 per `vec4<f16>`, 8 per `vec4<u32>`.
        let vsh = if wl || self.gl { 3 } else { 2 };
        // One 16-byte element `w` (`H8`) into the two `vec4<f16>` registers, zero where
        // `ok` (a checked load) is false.
        let split = |regs: &[(String, &str)], decl: &str, ok: Option<&str>| {
            let part = |p: &str| match ok {
                Some(ok) => format!("select(vec4<f16>(), w.{p}, {ok})"),
                None => format!("w.{p}"),
            };
            format!("{decl}{} = {}; {decl}{} = {};", regs[0].0, part("l"), regs[1].0, part("h"))
        };
        // Coordinates of a checked vector load, clamped into the operand with `cl` (K and
        // N are multiples of 8 on the vector paths, and at least one 16-wide tile).
        let clamp = |x: &str, xl: &str, y: &str, yl: &str| {
            if checked && self.cl {
                (format!("min({x}, {xl})"), format!("min({y}, {yl})"))
            } else {
                (x.to_string(), y.to_string())
            }
        };
        let vec = |c: &mut String,
                   tot: u32,
                   reg: &str,
                   arr: &str,
                   idx: &str,
                   cond: &str,
                   dst: &str,
                   at: &str| {
            for t in 0..tot.div_ceil(nt) {
                let _ = writeln!(c, "    {{ let e = tid + {}u;", t * nt);
                let mut conds = Vec::new();
                if !tot.is_multiple_of(nt) {
                    conds.push(format!("e < {tot}u"));
                }
                if checked {
                    conds.push(guard(cond));
                }
                let regs = self.regs(reg, t);
                let decl = if to_regs { "" } else { "var " };
                let _ = writeln!(c, "      {idx}");
                if checked && self.cl {
                    // Clamped address (always inside the operand), zero selected outside:
                    // no branch, so the loads of a step issue together.
                    let _ = writeln!(c, "      let ok = {};", conds.join(" && "));
                    if self.gl {
                        let _ = writeln!(
                            c,
                            "      let w = {arr}[{arr}_at];\n      {}",
                            split(&regs, decl, Some("ok"))
                        );
                    }
                    for (i, (r, ty)) in regs.iter().enumerate().filter(|_| !self.gl) {
                        let _ = writeln!(
                            c,
                            "      {decl}{r} = select({ty}(), {arr}[{arr}_at + {i}u], ok);"
                        );
                    }
                    if !to_regs {
                        c.push_str(&self.put(&regs, dst, at, tot));
                    }
                    c.push_str("    }\n");
                    continue;
                }
                let mut body = format!("let at = {arr}_at;");
                for (i, (r, ty)) in regs.iter().enumerate() {
                    let _ = write!(c, "      {decl}{r} = {ty}();");
                    if !self.gl {
                        let _ = write!(body, " {r} = {arr}[at + {i}u];");
                    }
                }
                if self.gl {
                    let _ = write!(body, " let w = {arr}[at]; {}", split(&regs, "", None));
                }
                c.push('\n');
                if conds.is_empty() {
                    let _ = writeln!(c, "      {{ {body} }}");
                } else {
                    let _ = writeln!(c, "      if ({}) {{ {body} }}", conds.join(" && "));
                }
                if !to_regs {
                    c.push_str(&self.put(&regs, dst, at, tot));
                }
                c.push_str("    }\n");
            }
        };
        if sel.0 {
            if self.va {
                let (mc, kc) = clamp("m", "Mr - 1u", "k", "K - 8u");
                let idx = format!("let m = m0 + e / {q}u; let k = {k0} + (e % {q}u) * 8u; let a_at = u32(abase + i32({mc}) * sam + i32({kc})) >> {vsh}u;");
                let at = format!("{st} * {a_stage}u + (e / {q}u) * {as_}u + (e % {q}u) * 8u");
                vec(&mut c, bm * q, "ra", "a", &idx, "m < Mr && k < K", "As", &at);
            } else if wl {
                // Pairs of halves along K, packed into one word of the slab.
                let h = bk / 2;
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bm * h);
                let _ = writeln!(c, "      let r = e / {h}u; let kk = (e % {h}u) * 2u; let m = m0 + r; let k = {k0} + kk;");
                c.push_str("      let i0 = u32(abase + i32(m) * sam + i32(k) * sak); let i1 = u32(i32(i0) + sak);\n");
                if checked {
                    c.push_str("      var v0 = f16(0.0); var v1 = f16(0.0);\n      if (m < Mr && k < K) { v0 = ha(i0); }\n      if (m < Mr && k + 1u < K) { v1 = ha(i1); }\n");
                } else {
                    c.push_str("      let v0 = ha(i0); let v1 = ha(i1);\n");
                }
                let _ = writeln!(c, "      As[({st} * {a_stage}u + r * {as_}u + kk) >> 1u] = pack2x16float(vec2<f32>(f32(v0), f32(v1)));\n    }}");
            } else {
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bm * bk);
                let _ = writeln!(
                    c,
                    "      let r = e / {bk}u; let kk = e % {bk}u; let m = m0 + r; let k = {k0} + kk;"
                );
                let ld = "a[u32(abase + i32(m) * sam + i32(k) * sak)]";
                if checked && self.cl {
                    let _ = writeln!(c, "      let v = select(f16(0.0), a[u32(abase + i32(min(m, Mr - 1u)) * sam + i32(min(k, K - 1u)) * sak)], m < Mr && k < K);");
                } else if checked {
                    let _ = writeln!(
                        c,
                        "      var v = f16(0.0);\n      if ({}) {{ v = {ld}; }}",
                        guard("m < Mr && k < K")
                    );
                } else {
                    let _ = writeln!(c, "      let v = {ld};");
                }
                let _ = writeln!(c, "      As[{st} * {a_stage}u + r * {as_}u + kk] = v;\n    }}");
            }
        }
        if sel.1 {
            if self.vb {
                let (kc, nc) = clamp("k", "K - 1u", "n", "N - 8u");
                let idx = format!("let n = n0 + (e % {qn}u) * 8u; let k = {k0} + e / {qn}u; let b_at = u32(bbase + i32({kc}) * sbk + i32({nc})) >> {vsh}u;");
                let at = format!("{st} * {b_stage}u + (e / {qn}u) * {bs_}u + (e % {qn}u) * 8u");
                vec(&mut c, bk * qn, "rb", "b", &idx, "n < N && k < K", "Bs", &at);
            } else if wl {
                // Pairs of halves along N.
                let h = bn / 2;
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bk * h);
                let _ = writeln!(c, "      let kk = e / {h}u; let cc = (e % {h}u) * 2u; let n = n0 + cc; let k = {k0} + kk;");
                c.push_str("      let i0 = u32(bbase + i32(k) * sbk + i32(n) * sbn); let i1 = u32(i32(i0) + sbn);\n");
                if checked {
                    c.push_str("      var v0 = f16(0.0); var v1 = f16(0.0);\n      if (n < N && k < K) { v0 = hb(i0); }\n      if (n + 1u < N && k < K) { v1 = hb(i1); }\n");
                } else {
                    c.push_str("      let v0 = hb(i0); let v1 = hb(i1);\n");
                }
                let _ = writeln!(c, "      Bs[({st} * {b_stage}u + kk * {bs_}u + cc) >> 1u] = pack2x16float(vec2<f32>(f32(v0), f32(v1)));\n    }}");
            } else {
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bk * bn);
                let _ = writeln!(
                    c,
                    "      let kk = e / {bn}u; let cc = e % {bn}u; let n = n0 + cc; let k = {k0} + kk;"
                );
                let ld = "b[u32(bbase + i32(k) * sbk + i32(n) * sbn)]";
                if checked && self.cl {
                    let _ = writeln!(c, "      let v = select(f16(0.0), b[u32(bbase + i32(min(k, K - 1u)) * sbk + i32(min(n, N - 1u)) * sbn)], n < N && k < K);");
                } else if checked {
                    let _ = writeln!(
                        c,
                        "      var v = f16(0.0);\n      if ({}) {{ v = {ld}; }}",
                        guard("n < N && k < K")
                    );
                } else {
                    let _ = writeln!(c, "      let v = {ld};");
                }
                let _ = writeln!(c, "      Bs[{st} * {b_stage}u + kk * {bs_}u + cc] = v;\n    }}");
            }
        }
        c
    }

    /// Stores of the register-held vectors (vector paths) into stage `st`.
    fn store(&self, st: &str) -> String {
        self.store_sel(st, (true, true))
    }

    /// [`store`](Self::store) of the operands `sel` picks (A, B).
    fn store_sel(&self, st: &str, sel: (bool, bool)) -> String {
        let Loop { bm, bn, nt, bk, as_, bs_, a_stage, b_stage, .. } = *self;
        let (q, qn) = (bk / 8, bn / 8);
        let mut c = String::new();
        let mut one = |tot: u32, reg: &str, dst: &str, at: String| {
            for t in 0..tot.div_ceil(nt) {
                let _ = writeln!(c, "    {{ let e = tid + {}u;", t * nt);
                c.push_str(&self.put(&self.regs(reg, t), dst, &at, tot));
                c.push_str("    }\n");
            }
        };
        if self.va && sel.0 {
            one(
                bm * q,
                "ra",
                "As",
                format!("{st} * {a_stage}u + (e / {q}u) * {as_}u + (e % {q}u) * 8u"),
            );
        }
        if self.vb && sel.1 {
            one(
                bk * qn,
                "rb",
                "Bs",
                format!("{st} * {b_stage}u + (e / {qn}u) * {bs_}u + (e % {qn}u) * 8u"),
            );
        }
        c
    }

    /// Eight halves held in `regs` into `dst` at element `at` (an expression of `e`; four
    /// words at `at / 2` when word-typed), guarded by `e < tot` when the threads do not divide
    /// the slab evenly.
    fn put(&self, regs: &[(String, &str)], dst: &str, at: &str, tot: u32) -> String {
        let mut c = String::new();
        let open = if !tot.is_multiple_of(self.nt) {
            format!("      if (e < {tot}u) {{\n")
        } else {
            "      {\n".into()
        };
        c.push_str(&open);
        let v = if dst == "As" { self.vsa } else { self.vsb };
        if self.wl {
            let _ = writeln!(c, "      let at = ({at}) >> 1u;");
            for (i, part) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[0].0);
            }
        } else if v == 4 {
            let _ = writeln!(c, "      let at = ({at}) >> 2u;");
            let _ = writeln!(
                c,
                "      {dst}[at] = {};\n      {dst}[at + 1u] = {};",
                regs[0].0, regs[1].0
            );
        } else if v == 2 {
            let _ = writeln!(c, "      let at = ({at}) >> 1u;");
            for (i, (r, part)) in [(0, "xy"), (0, "zw"), (1, "xy"), (1, "zw")].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[*r].0);
            }
        } else {
            let _ = writeln!(c, "      let at = {at};");
            for (i, part) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[0].0);
                let _ = writeln!(c, "      {dst}[at + {}u] = {}.{part};", i + 4, regs[1].0);
            }
        }
        c.push_str("      }\n");
        c
    }

    /// The `rq1` interior loop (both operands on the vector paths, two slabs): two register
    /// sets take turns, so each slab's global loads are issued two steps before its products
    /// (one with `db` alone); the loop is unrolled by two so every stage and register set is
    /// a constant. Invariant at the top: stage 0 holds slab `k0`, set 1 slab `k0 + bk`.
    fn ring(&self, decl_regs: &dyn Fn(&mut String)) -> String {
        let (bk, a_stage, b_stage) = (self.bk, self.a_stage, self.b_stage);
        // Set 1: the same code with its own registers.
        let set1 = |code: String| -> String {
            let mut code = code;
            for t in 0..16 {
                for h in ["l", "h"] {
                    code = code
                        .replace(&format!("ra{t}{h}"), &format!("qa{t}{h}"))
                        .replace(&format!("rb{t}{h}"), &format!("qb{t}{h}"));
                }
            }
            code
        };
        let mut c = String::new();
        let mut d = String::new();
        decl_regs(&mut d);
        c.push_str(&d);
        c.push_str(&set1(d));
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", false, true));
        c.push_str(&self.store("0u"));
        let _ = writeln!(c, "    }}\n    if ({bk}u < K) {{");
        c.push_str(&set1(self.load(&format!("{bk}u"), "1u", false, true)));
        c.push_str("    }\n    workgroupBarrier();\n");
        // Whole pairs of steps (no branch around the matrix operations: naga does not count
        // a condition on the loop counter as uniform), then an odd last step from stage 0.
        let _ =
            writeln!(c, "    var k0 = 0u;\n    for (; k0 + {0}u <= K; k0 = k0 + {0}u) {{", 2 * bk);
        // Slab k0 from stage 0: set 0 takes slab k0 + 2bk, set 1 lands in stage 1.
        let _ = writeln!(c, "    {{\n    if (k0 + {}u < K) {{", 2 * bk);
        c.push_str(&self.load(&format!("k0 + {}u", 2 * bk), "0u", false, true));
        c.push_str("    }\n    let ab = 0u; let bb = 0u;\n");
        c.push_str(&self.products());
        c.push_str(&set1(self.store("1u")));
        c.push_str("    workgroupBarrier();\n    }\n");
        // Slab k0 + bk from stage 1: set 1 takes slab k0 + 3bk, set 0 lands in stage 0.
        let _ = writeln!(c, "    {{\n    if (k0 + {}u < K) {{", 3 * bk);
        c.push_str(&set1(self.load(&format!("k0 + {}u", 3 * bk), "1u", false, true)));
        let _ = writeln!(c, "    }}\n    let ab = {a_stage}u; let bb = {b_stage}u;");
        c.push_str(&self.products());
        let _ = writeln!(c, "    if (k0 + {}u < K) {{", 2 * bk);
        c.push_str(&self.store("0u"));
        c.push_str("    }\n    workgroupBarrier();\n    }\n    }\n");
        // (`Wfull` is free here: the ring only runs in whole-block kernels; the uniform load
        // makes the K-dependent condition uniform for naga.)
        let _ =
            writeln!(c, "    if (tid == 0u) {{ Wfull = select(0u, 1u, K % {}u != 0u); }}", 2 * bk);
        c.push_str(
            "    if (workgroupUniformLoad(&Wfull) == 1u) {\n    let ab = 0u; let bb = 0u;\n",
        );
        c.push_str(&self.products());
        c.push_str("    }\n");
        c
    }

    /// The staged K loop; `checked` bounds-checks every global load (edge workgroups).
    fn shared(&self, checked: bool) -> String {
        let Loop { bk, a_stage, b_stage, .. } = *self;
        let mut c = String::new();
        let vecs = self.va || self.vb;
        let Loop { bm, bn, nt, .. } = *self;
        // Register-held vectors live across the loop (`db`, `rp`).
        let decl_regs = |c: &mut String| {
            for (on, reg, tot) in [(self.va, "ra", bm * bk / 8), (self.vb, "rb", bk * bn / 8)] {
                for t in 0..if on { tot.div_ceil(nt) } else { 0 } {
                    for (r, ty) in self.regs(reg, t) {
                        let _ = writeln!(c, "    var {r} = {ty}();");
                    }
                }
            }
        };
        if self.rq && !checked && self.va && self.vb {
            return self.ring(&decl_regs);
        }
        if self.rp && vecs {
            // One slab: the vector operands' next slab is in registers while this one is
            // multiplied; scalar-staged operands load straight into the slab between the
            // two barriers.
            let sel = (self.va, self.vb);
            decl_regs(&mut c);
            c.push_str("    {\n");
            c.push_str(&self.load_sel("0u", "0u", checked, true, sel));
            c.push_str("    }\n");
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            c.push_str("    workgroupBarrier();\n");
            c.push_str(&self.store("0u"));
            c.push_str(&self.load_sel("k0", "0u", checked, false, (!self.va, !self.vb)));
            c.push_str("    workgroupBarrier();\n");
            let _ = writeln!(c, "    let nxt = k0 + {bk}u;\n    if (nxt < K) {{");
            c.push_str(&self.load_sel("nxt", "0u", checked, true, sel));
            c.push_str("    }\n    let ab = 0u; let bb = 0u;\n");
            c.push_str(&self.products());
            c.push_str("    }\n");
            return c;
        }
        if !self.db {
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            c.push_str(&self.load("k0", "0u", checked, false));
            c.push_str("    workgroupBarrier();\n    let ab = 0u; let bb = 0u;\n");
            c.push_str(&self.products());
            c.push_str("    workgroupBarrier();\n    }\n");
            return c;
        }
        decl_regs(&mut c);
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", checked, true));
        c.push_str(&self.store("0u"));
        c.push_str("    }\n    workgroupBarrier();\n    var st = 0u;\n");
        let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
        let _ = writeln!(c, "    let nxt = k0 + {bk}u; let ot = 1u - st;");
        let _ = writeln!(c, "    let ab = st * {a_stage}u; let bb = st * {b_stage}u;");
        if self.sp {
            // Split prefetch: A's next slab is in registers during the first half of the
            // products and B's during the second, so half the staging registers are live
            // next to the accumulators and fragments.
            let half = (bk / self.s / 2) * self.s;
            for (sel, lo, hi) in [((true, false), 0, half), ((false, true), half, bk)] {
                c.push_str("    if (nxt < K) {\n");
                c.push_str(&self.load_sel("nxt", "ot", checked, true, sel));
                c.push_str("    }\n");
                c.push_str(&self.products_range(lo, hi));
                if (self.va && sel.0) || (self.vb && sel.1) {
                    c.push_str("    if (nxt < K) {\n");
                    c.push_str(&self.store_sel("ot", sel));
                    c.push_str("    }\n");
                }
            }
            c.push_str("    workgroupBarrier();\n    st = ot;\n    }\n");
            return c;
        }
        c.push_str("    if (nxt < K) {\n");
        c.push_str(&self.load("nxt", "ot", checked, true));
        c.push_str("    }\n");
        c.push_str(&self.products());
        if vecs {
            c.push_str("    if (nxt < K) {\n");
            c.push_str(&self.store("ot"));
            c.push_str("    }\n");
        }
        c.push_str("    workgroupBarrier();\n    st = ot;\n    }\n");
        c
    }
}
