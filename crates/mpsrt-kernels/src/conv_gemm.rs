//! Implicit-GEMM convolution rendered from a [`ConvGemmSpec`]: `out[n, oc, p] = act(Σ_k W[oc, k]
//! · X̂[k, n·P + p] + bias[oc] + res[n, oc, p])`, where `X̂` is the im2col matrix of the NCHW
//! input, gathered on the fly instead of being written to memory, and the result lands in NCHW
//! directly (no `[OC, N·P]` product to permute).
//!
//! Why a second conv kernel: lowered to im2col + the tiled matmul, a batch-32 ResNet-50 conv
//! writes and re-reads a column matrix of 50–460 MB, permutes a `[OC, N, P]` product back to
//! NCHW, and measured 2–7 TFLOP/s on an H100 against the same matmul kernel's 28 on square
//! matrices. This kernel keeps the matmul's structure — 256 threads, a `BM × BN` output tile
//! (64 or 128 each way, so OC = 64 layers waste no half tile), K staged 8 at a time in
//! `var<workgroup>` memory as `vec4` rows, 4–8 × 4–8 outputs per thread in named `vec4`
//! registers (fully unrolled: runtime-indexed arrays would live in local memory on NVIDIA, the
//! fault of `conv.wgsl`'s older implicit GEMM), the next K slab prefetched into registers while
//! the current one is multiplied — and replaces the B operand's load by the gather. Everything
//! about the geometry is a WGSL constant, so the `k → (ic, kh, kw)` and `column → (n, oh, ow)`
//! divisions compile to multiplies; each thread decomposes its columns once, before the K loop.
//! The batch size stays a runtime value (meta word 0 holds N·P).
//!
//! Meta words: 0 columns (N·P), 1 x offset, 2 w offset, 3 activation p0, 4 bias offset,
//! 5 output offset (a strided output, `out_img`), 6 residual offset, 7 gate offset
//! (`in_scale`), 8 and 9 scale and shift offsets (`in_affine`) (offsets in floats), 15
//! activation p1 — p0 and p1 where the matmul keeps
//! them, so both kernels share [`MatmulAct`]'s WGSL.

use crate::matmul::MatmulAct;
use std::fmt::Write;

/// Everything that determines an implicit-GEMM conv kernel's source (one ungrouped conv
/// geometry; the batch size is not part of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGemmSpec {
    /// Input channels, height, width.
    pub c: u32,
    pub h: u32,
    pub w: u32,
    /// Output channels, height, width.
    pub oc: u32,
    pub oh: u32,
    pub ow: u32,
    /// Kernel size, strides, top/left padding, dilations.
    pub kh: u32,
    pub kw: u32,
    pub sh: u32,
    pub sw: u32,
    pub ph: u32,
    pub pw: u32,
    pub dh: u32,
    pub dw: u32,
    /// Output tile: `bm` output channels × `bn` output columns (64 or 128 each; or 32 × 128,
    /// for layers with ≤ 32 output channels — DenseNet's growth convs — whose 64-row tile
    /// would be half empty: the 256 threads then stand 8 × 32 instead of 16 × 16).
    pub bm: u32,
    pub bn: u32,
    /// Weights read as `vec4` along K (K % 4 == 0 and a 4-aligned offset).
    pub w_vec: bool,
    /// Store (and read the residual) as `vec4`: P % 4 == 0 and 4-aligned offsets.
    pub vec_out: bool,
    pub has_bias: bool,
    pub has_res: bool,
    pub act: MatmulAct,
    /// Split-K: `0` computes the whole K; else each workgroup `z` sums K rows
    /// `[z·kslice, (z+1)·kslice)` (a multiple of 8) and stores its raw partial product at
    /// `z·OC·N·P` of an `[S, N, OC, P]` buffer, without bias, residual or activation —
    /// [`conv_splitk_reduce_kernel`] adds the slices and applies them.
    pub kslice: u32,
    /// `0`: a dense `[N, OC, P]` output. Else the output is a channel slice of a larger NCHW
    /// tensor (DenseNet's concat written in place by its producers, issue 22): image `n`
    /// starts `out_img` floats after image `n - 1`, and the slice at the float offset in
    /// meta word 5. Whole K only (a split's partials are dense; its reduce pass places them).
    pub out_img: u32,
    /// The input is read scaled per image and channel: `x[n, c, ·] · gate[n·C + c]` (a
    /// squeeze-excitation gate's `Mul` folded into the conv that reads its product, issue 22),
    /// the gate bound after the residual, its float offset in meta word 7.
    pub in_scale: bool,
    /// The input is read as `max(x · scale[c] + shift[c], 0)` (a BatchNorm + Relu folded into
    /// the conv that reads its output: DenseNet's pre-activation, issue 22), applied to the
    /// loads inside the image only (padding stays 0 after the activation); scale and shift
    /// bound after the gate, their float offsets in meta words 8 and 9.
    pub in_affine: bool,
    /// `0`: a dense NCHW input. Else image `n` of the input starts `in_img` floats after
    /// image `n - 1` (a channel slice of a wider tensor: a concat's view).
    pub in_img: u32,
}

impl ConvGemmSpec {
    /// Inner dimension `C·KH·KW`.
    pub fn k(&self) -> u32 {
        self.c * self.kh * self.kw
    }

    /// Number of K slices (1 without split-K).
    pub fn slices(&self) -> u32 {
        if self.kslice == 0 {
            1
        } else {
            self.k().div_ceil(self.kslice)
        }
    }

    /// Workgroups for a batch of `n` images: `[column tiles, channel tiles, K slices]`.
    pub fn grid(&self, n: u32) -> [u32; 3] {
        let cols = n * self.oh * self.ow;
        [cols.div_ceil(self.bn), self.oc.div_ceil(self.bm), self.slices()]
    }

    /// Render the WGSL source; fails for tile sizes the renderer does not produce.
    pub fn render(&self) -> Result<String, String> {
        let narrow = self.bm == 32 && self.bn == 128;
        for (name, t) in [("bm", self.bm), ("bn", self.bn)] {
            if t != 64 && t != 128 && !narrow {
                return Err(format!(
                    "conv_gemm: {name} must be 64 or 128 (or a 32x128 tile), got {t}"
                ));
            }
        }
        if self.kh * self.kw * self.c == 0 || self.oh * self.ow == 0 {
            return Err("conv_gemm: empty geometry".into());
        }
        let split = self.kslice != 0;
        if self.out_img != 0
            && (split || self.has_res || self.out_img < self.oc * self.oh * self.ow)
        {
            return Err(format!(
                "conv_gemm: a strided output needs whole K, no residual and an image stride of at \
                 least OC·P, got {self:?}"
            ));
        }
        if split
            && (!self.kslice.is_multiple_of(8)
                || self.has_bias
                || self.has_res
                || self.act != MatmulAct::None)
        {
            return Err(format!(
                "conv_gemm: a K slice must be a multiple of 8 without bias/residual, got {self:?}"
            ));
        }
        // Thread blocks of 64×64 outputs (16×16 threads of 4×4); a 32×128 tile is one block of
        // 8×32 threads.
        let (gm, gn) =
            if narrow { (1, 1) } else { ((self.bm / 64) as usize, (self.bn / 64) as usize) };
        let (qa, qb) = (self.bm / 4, self.bn / 4);
        let cpt = (self.bn / 32) as usize; // B columns loaded per thread
        let p = self.oh * self.ow;
        let mut s = String::with_capacity(20000);
        let _ = writeln!(s, "// generated by mpsrt-kernels: conv_gemm {self:?}");
        for (name, v) in [
            ("C", self.c),
            ("H", self.h),
            ("W", self.w),
            ("OC", self.oc),
            ("OW", self.ow),
            ("P", p),
            ("KW", self.kw),
            ("KHW", self.kh * self.kw),
            ("HW", self.h * self.w),
            ("K", self.k()),
            ("SH", self.sh),
            ("SW", self.sw),
            ("DH", self.dh),
            ("DW", self.dw),
        ] {
            let _ = writeln!(s, "const {name}: u32 = {v}u;");
        }
        let _ = writeln!(s, "const PH: i32 = {}; const PW: i32 = {};", self.ph, self.pw);
        s.push_str("struct Meta { w: array<vec4<u32>, 4> };\n");
        let wty = if self.w_vec { "vec4<f32>" } else { "f32" };
        let oty = if self.vec_out { "vec4<f32>" } else { "f32" };
        let mut bufs = vec![("x", "f32", "read"), ("wt", wty, "read")];
        if self.has_bias {
            bufs.push(("bias", "f32", "read"));
        }
        if self.has_res {
            bufs.push(("res", oty, "read"));
        }
        if self.in_scale {
            bufs.push(("gate", "f32", "read"));
        }
        if self.in_affine {
            bufs.push(("ascale", "f32", "read"));
            bufs.push(("ashift", "f32", "read"));
        }
        bufs.push(("out", oty, "read_write"));
        for (i, (name, ty, access)) in bufs.iter().enumerate() {
            let _ =
                writeln!(s, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
        }
        let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
        s.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
        s.push_str(self.act.wgsl());
        let _ = writeln!(s, "var<workgroup> As: array<vec4<f32>, {}>;", 8 * qa);
        let _ = writeln!(s, "var<workgroup> Bs: array<vec4<f32>, {}>;", 8 * qb);
        s.push_str("@compute @workgroup_size(256)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n");
        s.push_str("  let NCOLS = mw(0u); let xoff = i32(mw(1u)); let woff = mw(2u);\n");
        let _ = writeln!(s, "  let m0 = wid.y * {}u; let n0 = wid.x * {}u;", self.bm, self.bn);
        let txn = if narrow { 32 } else { 16 };
        let _ = writeln!(s, "  let tx = tid % {txn}u; let ty = tid / {txn}u;");
        // The thread's B columns, decomposed once: input row/column of the window's corner
        // (far out of range for columns past the end, so every bounds test fails) and its base.
        let _ = writeln!(s, "  let kr = tid / 32u; let cb = n0 + (tid % 32u) * {cpt}u;");
        let x_img =
            if self.in_img == 0 { "C * HW".to_string() } else { format!("{}u", self.in_img) };
        // The gate's row of each column's image (`in_scale`).
        let gate = if self.in_scale { " gb{j} = mw(7u) + img * C;" } else { "" };
        for j in 0..cpt {
            if self.in_scale {
                let _ = writeln!(s, "  var gb{j} = 0u;");
            }
            let _ = writeln!(
                s,
                "  var ih{j} = -1048576; var iw{j} = 0; var xb{j} = 0;\n  {{ let col = cb + {j}u; if (col < NCOLS) {{ let img = col / P; let p = col % P; ih{j} = i32((p / OW) * SH) - PH; iw{j} = i32((p % OW) * SW) - PW; xb{j} = xoff + i32(img * {}) + ih{j} * i32(W) + iw{j};{} }} }}",
                x_img,
                gate.replace("{j}", &j.to_string())
            );
        }
        for j in 0..cpt {
            let _ = writeln!(s, "  var pb{j} = 0.0;");
        }
        let (a_decl, a_load, a_store) = self.a_code();
        s.push_str(&a_decl);
        let b_load = self.b_load(cpt);
        let b_store = if cpt == 4 {
            "    Bs[kr * 32u + tid % 32u] = vec4<f32>(pb0, pb1, pb2, pb3);\n".to_string()
        } else {
            format!("    {{ let c = (tid % 32u) * 2u; Bs[kr * {qb}u + (c >> 2u)][c & 3u] = pb0; Bs[kr * {qb}u + (c >> 2u)][(c & 3u) + 1u] = pb1; }}\n")
        };
        if split {
            // This workgroup's K range; the loads' `k < K` tests stay right because every
            // slice but the last ends on a multiple of 8 inside K.
            let _ = writeln!(
                s,
                "  let kbeg = wid.z * {ks}u; let kend = min(K, kbeg + {ks}u);",
                ks = self.kslice
            );
        } else {
            s.push_str("  let kbeg = 0u; let kend = K;\n");
        }
        k_loop_range(
            &mut s,
            (gm, gn),
            (qa, qb),
            &format!("{a_load}{b_load}"),
            &format!("{a_store}{b_store}"),
        );
        self.epilogue(&mut s, gm, gn);
        s.push_str("}\n");
        Ok(s)
    }

    /// Register declarations, global→register prefetch (uses `k0n`) and register→workgroup
    /// store of the weight tile (`bm` rows × 8 K, row-major `[OC, K]` weights).
    fn a_code(&self) -> (String, String, String) {
        let (bm, qa) = (self.bm, self.bm / 4);
        let (mut decl, mut ld, mut st) = (String::new(), String::new(), String::new());
        if self.w_vec {
            // `bm` rows × 2 vec4 along K: one per thread (128 rows) or half the threads (64).
            let guard = if bm == 128 { "true".to_string() } else { format!("tid < {}u", 2 * bm) };
            decl.push_str("  var pa = vec4<f32>(0.0);\n");
            let _ = writeln!(
                ld,
                "    if ({guard}) {{ let r = m0 + tid / 2u; let k = k0n + (tid % 2u) * 4u; pa = vec4<f32>(0.0); if (r < OC && k < K) {{ pa = wt[(woff + r * K + k) >> 2u]; }} }}"
            );
            let _ = writeln!(
                st,
                "    if ({guard}) {{ let r = tid / 2u; let k = (tid % 2u) * 4u;\n      for (var c = 0u; c < 4u; c = c + 1u) {{ As[(k + c) * {qa}u + (r >> 2u)][r & 3u] = pa[c]; }} }}"
            );
        } else {
            for j in 0..bm / 32 {
                let _ = writeln!(decl, "  var pa{j} = 0.0;");
                let _ = writeln!(
                    ld,
                    "    {{ let r = m0 + (tid + {o}u) / 8u; let k = k0n + (tid + {o}u) % 8u; pa{j} = 0.0; if (r < OC && k < K) {{ pa{j} = wt[woff + r * K + k]; }} }}",
                    o = 256 * j
                );
                let _ = writeln!(
                    st,
                    "    {{ let r = (tid + {o}u) / 8u; let k = (tid + {o}u) % 8u; As[k * {qa}u + (r >> 2u)][r & 3u] = pa{j}; }}",
                    o = 256 * j
                );
            }
        }
        (decl, ld, st)
    }

    /// The gather of the thread's `cpt` columns of K row `k0n + kr` into `pb*` (zero in the
    /// padding and past the ends).
    fn b_load(&self, cpt: usize) -> String {
        let mut s = String::new();
        let pointwise = self.kh == 1 && self.kw == 1 && self.ph == 0 && self.pw == 0;
        s.push_str("    { let k = k0n + kr;\n");
        for j in 0..cpt {
            let _ = writeln!(s, "      pb{j} = 0.0;");
        }
        // The load of one input value, gated and/or pre-activated (`c`: its channel).
        let load = |j: usize, c: &str| {
            let mut v = format!("x[u32(xb{j} + ko)]");
            if self.in_scale {
                v = format!("{v} * gate[gb{j} + {c}]");
            }
            if self.in_affine {
                v = format!(
                    "{{ let a = {v} * ascale[mw(8u) + {c}] + ashift[mw(9u) + {c}]; pb{j} = select(a, 0.0, a < 0.0); }}"
                );
                return v;
            }
            format!("pb{j} = {v};")
        };
        if pointwise {
            // Every window is inside the input: only the column's own bound remains.
            s.push_str("      if (k < K) { let ko = i32(k * HW);\n");
            for j in 0..cpt {
                let l = load(j, "k");
                let _ = writeln!(s, "        if (ih{j} >= 0) {{ {l} }}");
            }
        } else {
            s.push_str("      if (k < K) { let ic = k / KHW; let r = k % KHW; let dy = i32((r / KW) * DH); let dx = i32((r % KW) * DW); let ko = i32(ic * HW) + dy * i32(W) + dx;\n");
            for j in 0..cpt {
                let l = load(j, "ic");
                let _ = writeln!(
                    s,
                    "        if (u32(ih{j} + dy) < H && u32(iw{j} + dx) < W) {{ {l} }}"
                );
            }
        }
        s.push_str("      }\n    }\n");
        s
    }

    /// Bias, residual, activation and the NCHW store of every accumulator.
    fn epilogue(&self, s: &mut String, gm: usize, gn: usize) {
        // Output offset of each of the thread's columns without the channel term (`img·OC·P +
        // p`; `m·P` is added per row), and whether the column exists. A strided output
        // (`out_img`) steps images by its own stride from the slice's offset (meta word 5).
        let (img, off) = if self.out_img == 0 {
            ("OC * P".to_string(), "")
        } else {
            (format!("{}u", self.out_img), " + mw(5u)")
        };
        for h in 0..gn {
            for c in 0..4 {
                let _ = writeln!(
                    s,
                    "  var ob{h}_{c} = 0u; let ok{h}_{c} = n0 + {}u + tx * 4u < NCOLS;\n  if (ok{h}_{c}) {{ let col = n0 + {}u + tx * 4u; ob{h}_{c} = (col / P) * {img} + col % P{off}; }}",
                    h * 64 + c,
                    h * 64 + c
                );
                if self.vec_out {
                    break; // the vector store needs only the first column's offset
                }
            }
        }
        // A split-K partial lands in slice `z` of the `[S, N, OC, P]` buffer.
        let zoff = if self.kslice != 0 { " + wid.z * OC * NCOLS" } else { "" };
        for gi in 0..gm {
            for i in 0..4 {
                let _ = writeln!(s, "  {{ let m = m0 + {}u + ty * 4u;", gi * 64 + i);
                s.push_str("    if (m < OC) {\n");
                if self.has_bias {
                    s.push_str("      let bv = bias[mw(4u) + m];\n");
                }
                for h in 0..gn {
                    let _ = writeln!(s, "      {{ var v = c{gi}_{i}_{h};");
                    if self.has_bias {
                        s.push_str("        v = v + vec4<f32>(bv);\n");
                    }
                    if self.vec_out {
                        let _ =
                            writeln!(s, "        if (ok{h}_0) {{ let o = ob{h}_0 + m * P{zoff};");
                        if self.has_res {
                            s.push_str("          v = v + res[(mw(6u) + o) >> 2u];\n");
                        }
                        s.push_str("          out[o >> 2u] = act(v);\n        }\n");
                    } else {
                        if self.has_res {
                            for c in 0..4 {
                                let _ = writeln!(
                                    s,
                                    "        if (ok{h}_{c}) {{ v[{c}u] = v[{c}u] + res[mw(6u) + ob{h}_{c} + m * P]; }}"
                                );
                            }
                        }
                        s.push_str("        v = act(v);\n");
                        for c in 0..4 {
                            let _ = writeln!(
                                s,
                                "        if (ok{h}_{c}) {{ out[ob{h}_{c} + m * P{zoff}] = v[{c}u]; }}"
                            );
                        }
                    }
                    s.push_str("      }\n");
                }
                s.push_str("    }\n  }\n");
            }
        }
    }
}

/// The matmul's K loop (`matmul::k_loop`: 8 K rows per step staged in workgroup memory, the
/// next slab prefetched into registers while this one is multiplied) over `[kbeg, kend)`
/// instead of `[0, K)`, so one kernel serves whole-K and split-K launches.
fn k_loop_range(
    s: &mut String,
    (gm, gn): (usize, usize),
    (qa, qb): (u32, u32),
    load: &str,
    store: &str,
) {
    for gi in 0..gm {
        for i in 0..4 {
            for h in 0..gn {
                let _ = writeln!(s, "  var c{gi}_{i}_{h} = vec4<f32>(0.0);");
            }
        }
    }
    let _ = write!(s, "  {{ let k0n = kbeg;\n{load}  }}\n");
    s.push_str("  for (var k0 = kbeg; k0 < kend; k0 = k0 + 8u) {\n");
    s.push_str(store);
    s.push_str("    workgroupBarrier();\n");
    let _ = write!(s, "    if (k0 + 8u < kend) {{ let k0n = k0 + 8u;\n{load}    }}\n");
    for kk in 0..8u32 {
        for gi in 0..gm {
            let _ = writeln!(s, "    let a{gi}_{kk} = As[{}u + ty];", kk * qa + gi as u32 * 16);
        }
        for h in 0..gn {
            let _ = writeln!(s, "    let b{h}_{kk} = Bs[{}u + tx];", kk * qb + h as u32 * 16);
        }
        for gi in 0..gm {
            for (i, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                for h in 0..gn {
                    let _ = writeln!(
                        s,
                        "    c{gi}_{i}_{h} = fma(vec4<f32>(a{gi}_{kk}.{comp}), b{h}_{kk}, c{gi}_{i}_{h});"
                    );
                }
            }
        }
    }
    s.push_str("    workgroupBarrier();\n  }\n");
}

/// The split-K sum of a conv: `out[e] = act(Σ_z part[z·total + e] + bias[(e / P) % OC] +
/// res[e])` over the `[S, N, OC, P]` partials of a split [`ConvGemmSpec`] launch, stored NCHW.
/// Each thread handles 4 consecutive outputs (one `vec4` when `total % 4 == 0`, which the
/// launcher guarantees by taking this kernel only then): the pass is bandwidth-bound.
/// Meta words: 0 total/4, 1 P, 2 OC, 3 activation p0, 4 threads per grid row, 5 bias offset,
/// 6 residual offset / 4, 7 slices, 15 activation p1. With `strided_out` the output is a
/// channel slice of a larger NCHW tensor: word 8 its offset / 4, 9 one image's OC·P / 4, 10
/// the output's image stride / 4 (all multiples of 4 floats: the launcher checks).
pub fn conv_splitk_reduce_kernel(
    has_bias: bool,
    has_res: bool,
    act: MatmulAct,
    strided_out: bool,
) -> String {
    let mut s = String::with_capacity(1536);
    let _ = writeln!(
        s,
        "// generated by mpsrt-kernels: conv split-K reduce bias={has_bias} res={has_res} {act:?}{}\n\
         // One thread sums 4 outputs over the slices with vec4 loads (bandwidth-bound).",
        if strided_out { " strided" } else { "" }
    );
    s.push_str("struct Meta { w: array<vec4<u32>, 4> };\n");
    let mut bufs = vec![("part", "vec4<f32>", "read")];
    if has_bias {
        bufs.push(("bias", "f32", "read"));
    }
    if has_res {
        bufs.push(("res", "vec4<f32>", "read"));
    }
    bufs.push(("out", "vec4<f32>", "read_write"));
    splitk_reduce_body(&mut s, &bufs, act, false, strided_out);
    s
}

/// Threads per workgroup of the conv split-K sums.
pub const SPLITK_REDUCE_WG: u32 = 256;

/// Bindings, meta accessor and body of a conv split-K sum, shared by the f32 implicit-GEMM conv
/// ([`conv_splitk_reduce_kernel`]) and the f16 cooperative conv
/// (`conv_coop::coop_conv_splitk_reduce`), which use the same meta words. `bufs` lists `part`,
/// then `bias` / `res` when present, then `out`. With `f16_out` the bias and residual are
/// widened to f32 before the sum and the result is narrowed to f16 on the way out.
pub(crate) fn splitk_reduce_body(
    s: &mut String,
    bufs: &[(&str, &str, &str)],
    act: MatmulAct,
    f16_out: bool,
    strided_out: bool,
) {
    let has = |n: &str| bufs.iter().any(|b| b.0 == n);
    for (i, (name, ty, access)) in bufs.iter().enumerate() {
        let _ = writeln!(s, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
    }
    let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
    s.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
    s.push_str(act.wgsl());
    let _ = writeln!(s, "@compute @workgroup_size({SPLITK_REDUCE_WG})");
    s.push_str("fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n");
    s.push_str(
        "  let e = gid.x + gid.y * mw(4u); let total4 = mw(0u);\n  if (e >= total4) { return; }\n",
    );
    s.push_str("  var v = vec4<f32>(0.0);\n  for (var j = 0u; j < mw(7u); j++) { v += part[j * total4 + e]; }\n");
    // Widen an f16 operand to the f32 sum.
    let widen = |ty: &str, x: &str| if f16_out { format!("{ty}({x})") } else { x.to_string() };
    if has("bias") {
        // The four outputs may straddle a channel boundary when P % 4 != 0.
        s.push_str("  let P = mw(1u); let OC = mw(2u); let bo = mw(5u);\n");
        let b = widen("f32", "bias[bo + ((e * 4u + c) / P) % OC]");
        let _ = writeln!(s, "  for (var c = 0u; c < 4u; c++) {{ v[c] += {b}; }}");
    }
    if has("res") {
        let _ = writeln!(s, "  v += {};", widen("vec4<f32>", "res[mw(6u) + e]"));
    }
    if strided_out {
        s.push_str("  let img = e / mw(9u);\n  out[mw(8u) + img * mw(10u) + (e - img * mw(9u))] = act(v);\n}\n");
    } else if f16_out {
        s.push_str("  out[e] = vec4<f16>(act(v));\n}\n");
    } else {
        s.push_str("  out[e] = act(v);\n}\n");
    }
}

/// The meta block of a [`ConvGemmSpec`] launch: `cols` = N·P, `offs` = x, w, bias and
/// residual offsets in floats, `p0`/`p1` the activation's parameters.
pub fn conv_gemm_meta(cols: u32, offs: [u32; 4], p0: f32, p1: f32) -> [u32; 16] {
    let mut m = [0u32; 16];
    m[..7].copy_from_slice(&[cols, offs[0], offs[1], p0.to_bits(), offs[2], 0, offs[3]]);
    m[15] = p1.to_bits();
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_conv_gemm_variant_validates_and_translates_to_msl() {
        let base = ConvGemmSpec {
            c: 3,
            h: 9,
            w: 7,
            oc: 5,
            oh: 9,
            ow: 7,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            ph: 1,
            pw: 1,
            dh: 1,
            dw: 1,
            bm: 64,
            bn: 64,
            w_vec: false,
            vec_out: false,
            has_bias: false,
            has_res: false,
            act: MatmulAct::None,
            kslice: 0,
            out_img: 0,
            in_scale: false,
            in_affine: false,
            in_img: 0,
        };
        for bm in [64, 128] {
            for bn in [64, 128] {
                for (w_vec, vec_out, has_bias, has_res, act, pointwise) in [
                    (false, false, false, false, MatmulAct::None, false),
                    (true, true, true, true, MatmulAct::Relu, false),
                    (true, false, true, true, MatmulAct::Clip, true),
                    (false, true, false, true, MatmulAct::LeakyRelu, true),
                ] {
                    let (kh, ph) = if pointwise { (1, 0) } else { (3, 1) };
                    let spec = ConvGemmSpec {
                        bm,
                        bn,
                        w_vec,
                        vec_out,
                        has_bias,
                        has_res,
                        act,
                        kh,
                        kw: kh,
                        ph,
                        pw: ph,
                        ..base
                    };
                    let src = spec.render().unwrap();
                    crate::validate::wgsl_to_msl(&src)
                        .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                }
                // Split-K partials (plain stores, scalar and vector).
                for vec_out in [false, true] {
                    let spec = ConvGemmSpec { bm, bn, vec_out, kslice: 16, ..base };
                    let src = spec.render().unwrap();
                    assert_eq!(spec.grid(2), [(2 * 63u32).div_ceil(bn), 1, 2]);
                    crate::validate::wgsl_to_msl(&src)
                        .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                }
            }
        }
        assert!(ConvGemmSpec { bm: 32, ..base }.render().is_err());
        for (vec_out, kslice, has_bias) in [(false, 0, true), (true, 0, false), (true, 16, false)] {
            let spec = ConvGemmSpec { bm: 32, bn: 128, vec_out, kslice, has_bias, ..base };
            assert_eq!(spec.grid(2), [1, 1, spec.slices()]);
            let src = spec.render().unwrap();
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        }
        assert!(ConvGemmSpec { kslice: 12, ..base }.render().is_err());
        assert!(ConvGemmSpec { kslice: 16, has_bias: true, ..base }.render().is_err());
        for (b, r, act, strided) in [
            (false, false, MatmulAct::None, false),
            (true, true, MatmulAct::Clip, false),
            (true, false, MatmulAct::Relu, true),
        ] {
            let src = conv_splitk_reduce_kernel(b, r, act, strided);
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        }
        // A channel slice of a wider output (concat written in place), scalar and vector.
        for vec_out in [false, true] {
            let spec = ConvGemmSpec { vec_out, has_bias: true, out_img: 12 * 63, ..base };
            let src = spec.render().unwrap();
            assert!(src.contains("* 756u + col % P + mw(5u)"), "{src}");
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        }
        assert!(ConvGemmSpec { out_img: 12 * 63, kslice: 16, ..base }.render().is_err());
        // A gated input (squeeze-excitation's Mul folded in), 1×1 and 3×3, whole K and split.
        for (kh, ph, kslice, narrow) in [(1, 0, 0, false), (3, 1, 0, true), (1, 0, 16, false)] {
            let (bm, bn) = if narrow { (32, 128) } else { (64, 64) };
            let spec =
                ConvGemmSpec { kh, kw: kh, ph, pw: ph, kslice, bm, bn, in_scale: true, ..base };
            let src = spec.render().unwrap();
            assert!(src.contains("* gate[gb0 + "), "{src}");
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        }
        // A pre-activated input (BatchNorm + Relu folded in) read from a channel slice.
        for (kh, ph, in_scale) in [(1, 0, false), (3, 1, true)] {
            let spec = ConvGemmSpec {
                kh,
                kw: kh,
                ph,
                pw: ph,
                in_scale,
                in_affine: true,
                in_img: 7 * 63,
                ..base
            };
            let src = spec.render().unwrap();
            assert!(src.contains("ascale[mw(8u) + ") && src.contains("i32(img * 441u)"), "{src}");
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        }
        assert!(ConvGemmSpec { out_img: 4 * 63, ..base }.render().is_err());
        // MobileNet/EfficientNet activations (issue 22) in every epilogue that renders `act`:
        // the implicit GEMM's scalar and vector stores, both split-K reductions.
        for act in
            [MatmulAct::HardSigmoid, MatmulAct::HardSwish, MatmulAct::Sigmoid, MatmulAct::Silu]
        {
            for vec_out in [false, true] {
                let spec = ConvGemmSpec { vec_out, has_bias: true, act, ..base };
                let src = spec.render().unwrap();
                crate::validate::wgsl_to_msl(&src)
                    .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            }
            for src in [
                conv_splitk_reduce_kernel(true, true, act, false),
                crate::splitk_reduce_kernel(true, true, act),
            ] {
                crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
            }
        }
    }
}
