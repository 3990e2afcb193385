//! Implicit-GEMM convolution on cooperative matrices (issue 23): f16 NCHW input and f16 OIHW
//! weights, f32 accumulation in `coop_mat{S}x{S}<f32, C>` (tensor cores through
//! `VK_KHR_cooperative_matrix`, Apple simdgroup matrices), bias / residual / activation applied
//! per element on the way out, f16 NCHW output.
//!
//! GEMM view: `M = OC` (rows: the weight matrix `[OC, K]`, which is the OIHW tensor as is),
//! `N = batch · OH · OW` (columns), `K = IC · KH · KW`. This orientation (rather than the
//! NHWC-friendly transpose `M = N·P`) is the one whose output columns are the contiguous axis
//! of an NCHW result: a tile row of the accumulator is a run of one channel's output pixels,
//! so the stores are runs of consecutive halves and no permute follows; the weights need no
//! reshaping at all (OIHW rows are K-contiguous, the A operand's natural row-major layout);
//! and the im2col gather walks consecutive output pixels, which are consecutive (stride 1) or
//! evenly spaced input pixels.
//!
//! Structure (the generation-3 GEMM's technique, `matmul_coop_family.rs`, specialised): a
//! workgroup of 2 × 2 subgroups owns a `BM × BN` output block (`tm × tn` cooperative tiles per
//! subgroup); K advances `bk` (32 or 64) at a time through two vector-typed (`vec4<f16>`) padded
//! slabs in workgroup memory: the next slab's global loads go to registers before the current
//! slab's products and into the other slab after them (one barrier per step). The A slab loads
//! 8 weights per `vec4<f16>` pair when `K % 8 == 0` (every ResNet-50 conv but the 7×7 stem,
//! K = 147), else 4 checked scalars. The B-tile load is the im2col gather: each thread owns 4
//! consecutive output columns, decomposed once into the input window's corner before the K
//! loop; per K row it decomposes `k → (ic, kh, kw)` once (divisions by WGSL constants: the
//! whole geometry is baked in, one pipeline per conv geometry and tile) and reads the 4 inputs
//! with padding checks. Pointwise stride-1 convs whose image size is a multiple of 4 read the 4
//! columns as one `vec4<f16>` (they are one image's consecutive pixels). Zero-filled K rows past
//! the end make odd K legal without padding the weights.
//!
//! Epilogue: each accumulator tile is stored to a per-subgroup f32 scratch, and each lane
//! applies `act(acc + bias[oc] + res[n, oc, p])` to its elements and stores them as f16 at
//! `out[n, oc, p]`. The batch size is a runtime value (meta word 0 holds N·P); meta words as
//! the f32 implicit GEMM's [`conv_gemm_meta`](crate::conv_gemm_meta): 1 x offset, 2 w offset,
//! 3 activation p0, 4 bias offset, 5 output offset, 6 residual offset (in elements), 15 p1.
//!
//! [`plan_coop_conv`] is the pure choice (adapter configurations, subgroup size, features,
//! workgroup-memory limit, geometry → spec or the reason it declines), tested with fake
//! configuration lists on lavapipe, which has no cooperative matrices.

use crate::matmul::MatmulAct;
use std::fmt::Write as _;

#[path = "conv_coop_direct.rs"]
mod direct;
#[path = "conv_coop_epi.rs"]
mod epi;
#[path = "conv_coop_plan.rs"]
mod plan;
#[path = "conv_coop_splitk.rs"]
mod splitk;
#[path = "conv_coop_tune.rs"]
mod tune;
pub use direct::CoopDirectSpec;
pub use plan::{plan_coop_conv, CoopConvDevice, CoopConvRoute};
pub use splitk::{coop_conv_splitk_reduce, coop_splitk_meta, SPLITK_REDUCE_WG};
pub use tune::{auto_splitk, tuned_structure, tuned_structure_of, ConvClass, ConvStructure};

/// K per workgroup-memory slab unless a spec asks for 64 (`CoopConvSpec::bk`).
pub const BK: u32 = 32;
/// Halves of padding per slab row: rows stay 16-byte aligned for the matrix loads while
/// consecutive rows start in different banks.
const PAD: u32 = 8;
/// Subgroups per workgroup along M and along N unless a spec asks otherwise.
const WM: u32 = 2;
const WN: u32 = 2;

/// One ungrouped 2-D convolution's geometry (the batch size is not part of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvShape {
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
}

impl ConvShape {
    /// Inner dimension `C·KH·KW`.
    pub fn k(&self) -> u32 {
        self.c * self.kh * self.kw
    }
    /// Output pixels per image.
    pub fn p(&self) -> u32 {
        self.oh * self.ow
    }
    /// 1×1 without padding: every window is inside the input.
    pub fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.ph == 0 && self.pw == 0
    }
}

/// A rendered cooperative-matrix conv kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConvSpec {
    pub shape: ConvShape,
    /// Cooperative tile size S (16 on NVIDIA, 8 on Apple).
    pub size: u32,
    /// Lanes per subgroup the kernel is rendered for.
    pub subgroup: u32,
    /// Subgroups per workgroup along M and N (2 × 2 unless timing others).
    pub wm: u32,
    pub wn: u32,
    /// Cooperative tiles per subgroup along M (output channels) and N (output columns): the
    /// block is `2·tm·S × 2·tn·S`.
    pub tm: u32,
    pub tn: u32,
    /// Weights read 8 halves at a time (`K % 8 == 0`, offset a multiple of 4 halves).
    pub w_vec: bool,
    /// Input read 4 columns at a time (pointwise, stride 1, `P % 4 == 0`, offset a multiple of
    /// 4 halves).
    pub x_vec: bool,
    pub has_bias: bool,
    /// The bias is f16 (else f32).
    pub bias_f16: bool,
    /// An f16 residual (NCHW like the output) added before the activation.
    pub has_res: bool,
    pub act: MatmulAct,
    /// K per slab: 16, 32 or 64 (twice the products per barrier and per exposed load latency,
    /// for twice the workgroup memory).
    pub bk: u32,
    /// Slab stages: 2 (the next slab's registers go to the other stage after the products,
    /// one barrier per step) or 1 (stored at the top of the step, two barriers per step; the
    /// next slab's global loads are still in flight during the products): half the slab
    /// memory, so more workgroups fit on an SM.
    pub slabs: u32,
    /// The epilogue's f32 scratch lives in the slab memory (dead once the K loop is done)
    /// instead of its own array: one `array<vec2<f32>>` holds both, the f16 slabs written as
    /// packed words (cooperative loads may read a matrix of another element type than the
    /// pointer's; stores may not, hence the f32 type). Saves `wm·wn·S²·4` bytes for a pack
    /// per pair of halves staged.
    pub alias: bool,
    /// Global loads as a clamped index plus a `select` of zero instead of a branch per load
    /// (the cooperative GEMM's `cl1`, which made its checked loop 2× faster on the H200).
    pub clamp: bool,
    /// Epilogue loads issued up front: every residual and bias value a lane applies to a
    /// group of accumulator tiles (all tiles, or one tile row when that would hold more than
    /// 32 values) is loaded into registers before the group's first tile is stored, so the
    /// lane waits for one memory latency per group instead of one per element (the residual
    /// convs of ResNet-50 b32 f16 ran 2.2-2.7x slower than the same conv without the residual
    /// on the H200, about 200 GB/s for the residual read). The launcher sets it for convs
    /// with a residual only (`MPSRT_COOP_CONV_PREFETCH=0`: never, for A/B).
    pub prefetch: bool,
    /// The epilogue stores pairs of adjacent output columns (`vec2<f16>`, and reads the
    /// residual in pairs): half the store instructions, 8-byte scratch reads. Needs an even
    /// `P` (a pair never straddles two images) and an even residual offset; replaces
    /// `prefetch` (each tile row's residual pairs are loaded before its first tile is stored).
    pub pairs: bool,
    /// K slices (1: none): workgroup `z` sums K rows `[z·KS, (z+1)·KS)` (`KS` a multiple of
    /// `bk`) and stores its raw f32 sums NCHW-ordered to slice `z` of an `[S, N, OC, P]`
    /// partial buffer bound as `out`; [`coop_conv_splitk_reduce`] adds the slices and applies
    /// bias, residual and activation (so neither is bound here). For convs whose grid would
    /// not fill the GPU (ResNet-50's 7×7 and 14×14 maps at batch 32).
    pub splitk: u32,
    /// Padding checks of the im2col gather as one bit test: each of a thread's 4 columns gets,
    /// before the K loop, a mask of the kernel offsets `r < KH·KW` whose input pixel is inside
    /// the image (not pointwise; one word for windows of at most 32 taps, two — `vec2<u32>` —
    /// for 33-64), so a K row's check is `(mask >> (k % KHW)) & 1` instead of two range
    /// compares per column.
    pub mask: bool,
    /// Testing: the same staging, gather and epilogue with the matrix products computed in f32
    /// registers (logical subgroups of `subgroup` invocations, no cooperative-matrix or
    /// subgroup features), so devices without matrix units — lavapipe in CI — check the
    /// kernel's indexing against the CPU conv (`MPSRT_COOP_CONV_EMULATE=1`).
    pub emulate: bool,
}

impl CoopConvSpec {
    /// Output channels per workgroup.
    pub fn block_m(&self) -> u32 {
        self.wm * self.tm * self.size
    }
    /// Output columns per workgroup.
    pub fn block_n(&self) -> u32 {
        self.wn * self.tn * self.size
    }
    /// Threads per workgroup.
    pub fn threads(&self) -> u32 {
        self.wm * self.wn * self.subgroup
    }
    /// Halves of one A slab stage and one B slab stage.
    fn stage_halves(&self) -> (u32, u32) {
        (self.block_m() * (self.bk + PAD), self.bk * (self.block_n() + PAD))
    }
    /// Workgroup-memory bytes: `slabs` A and B slab stages of f16, and one f32 S×S scratch per
    /// subgroup beside them or (`alias`) inside them.
    pub fn shared_bytes(&self) -> u32 {
        let (a, b) = self.stage_halves();
        let slab = self.slabs * (a + b) * 2;
        let scratch = self.wm * self.wn * self.size * self.size * 4;
        if self.alias {
            slab.max(scratch)
        } else {
            slab + scratch
        }
    }
    /// The A slab's element at vector index `idx` (4 halves) of the workgroup memory.
    pub(crate) fn sa(&self, idx: &str) -> String {
        if self.alias {
            format!("Sh[{idx}]")
        } else {
            format!("As[{idx}]")
        }
    }
    /// The B slab's element at vector index `idx`.
    pub(crate) fn sb(&self, idx: &str) -> String {
        if self.alias {
            format!("Sh[{}u + ({idx})]", self.slabs * self.stage_halves().0 / 4)
        } else {
            format!("Bs[{idx}]")
        }
    }
    /// Store a `vec4<f16>` value into a slab element.
    fn put(&self, lv: String, v: &str) -> String {
        if self.alias {
            // naga's bitcasts keep the width: the halves go in as packed words (an exact
            // round trip through f32).
            format!("{{ let v = {v}; {lv} = bitcast<vec2<f32>>(vec2<u32>(pack2x16float(vec2<f32>(v.xy)), pack2x16float(vec2<f32>(v.zw)))); }}")
        } else {
            format!("{lv} = {v};")
        }
    }
    /// One f32 of the epilogue scratch at scalar index `idx` (an lvalue).
    pub(crate) fn cs(&self, idx: &str) -> String {
        if self.alias {
            format!("Sh[({idx}) >> 1u][({idx}) & 1u]")
        } else {
            format!("Cs[{idx}]")
        }
    }
    /// Workgroups for a batch of `n` images: `[column blocks, channel blocks, 1]`.
    pub fn grid(&self, n: u32) -> [u32; 3] {
        let cols = n * self.shape.p();
        [cols.div_ceil(self.block_n()), self.shape.oc.div_ceil(self.block_m()), self.splitk]
    }

    fn check(&self) -> Result<(), String> {
        let s = self.size;
        if s != 8 && s != 16 {
            return Err(format!("conv_coop: tile size must be 8 or 16, got {s}"));
        }
        if !self.subgroup.is_power_of_two() || !(4..=128).contains(&self.subgroup) {
            return Err(format!("conv_coop: unsupported subgroup size {}", self.subgroup));
        }
        if self.emulate && !(s * s).is_multiple_of(self.subgroup) {
            return Err(format!("conv_coop: emulation needs S² % subgroup == 0, got {self:?}"));
        }
        if !matches!(self.wm, 1 | 2 | 4) || !matches!(self.wn, 1 | 2 | 4) {
            return Err(format!("conv_coop: wm and wn must be 1, 2 or 4, got {self:?}"));
        }
        if !matches!(self.tm, 1 | 2 | 4) || !matches!(self.tn, 1 | 2 | 4) {
            return Err(format!("conv_coop: tm and tn must be 1, 2 or 4, got {self:?}"));
        }
        let sh = &self.shape;
        if sh.k() == 0 || sh.p() == 0 || sh.oc == 0 || sh.sh == 0 || sh.sw == 0 {
            return Err(format!("conv_coop: empty geometry {sh:?}"));
        }
        let (nt, qb) = (self.threads(), self.block_n() / 4);
        // Each thread keeps the same 4 columns for every B row it loads.
        let bk = self.bk;
        if !matches!(bk, 16 | 32 | 64) || bk < s {
            return Err(format!("conv_coop: K step must be 16, 32 or 64 (and >= S), got {bk}"));
        }
        if !matches!(self.slabs, 1 | 2) {
            return Err(format!("conv_coop: 1 or 2 slab stages, got {}", self.slabs));
        }
        if !nt.is_multiple_of(qb) || !(bk * qb).is_multiple_of(nt) {
            return Err(format!("conv_coop: {nt} threads cannot tile a {bk}x{} B slab", qb * 4));
        }
        if self.w_vec && !sh.k().is_multiple_of(8) {
            return Err("conv_coop: vector weight loads need K % 8 == 0".into());
        }
        if self.splitk == 0 || (self.splitk > 1 && (self.has_bias || self.has_res || self.pairs)) {
            return Err(format!("conv_coop: split-K partials take no epilogue, got {self:?}"));
        }
        if self.mask && (sh.pointwise() || sh.kh * sh.kw > 64 || self.x_vec) {
            return Err("conv_coop: tap masks need a non-pointwise window of <= 64 taps".into());
        }
        if self.pairs && !sh.p().is_multiple_of(2) {
            return Err("conv_coop: paired stores need an even output map".into());
        }
        if self.x_vec && !(sh.pointwise() && sh.sh == 1 && sh.sw == 1 && sh.p().is_multiple_of(4)) {
            return Err(
                "conv_coop: vector input loads need a pointwise stride-1 conv with P % 4 == 0"
                    .into(),
            );
        }
        Ok(())
    }

    /// Aliased slabs take vector loads as raw words (`vec4<u32>` weights: 16-byte loads,
    /// `vec2<u32>` input columns), stored with a same-width bitcast instead of a pack.
    fn raw_w(&self) -> bool {
        self.alias && self.w_vec
    }
    fn raw_x(&self) -> bool {
        self.alias && self.x_vec
    }

    /// Whether [`render`](Self::render) accepts these parameters (without rendering).
    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// Render the WGSL source; fails for parameters the planner never produces.
    pub fn render(&self) -> Result<String, String> {
        self.check()?;
        let sh = self.shape;
        let (s, nt) = (self.size, self.threads());
        let (bm, bn, tm, tn) = (self.block_m(), self.block_n(), self.tm, self.tn);
        let bk = self.bk;
        let (as_, bs_) = (bk + PAD, bn + PAD);
        let (a_stage, b_stage) = (bm * as_, bk * bs_);
        let qb = bn / 4;
        let mut w = String::with_capacity(24576);
        let _ = writeln!(w, "// generated by mpsrt-kernels: conv_coop {self:?}");
        w.push_str(if self.emulate {
            "enable f16;\n"
        } else {
            "enable f16;\nenable wgpu_cooperative_matrix;\n"
        });
        for (name, v) in [
            ("CIN", sh.c),
            ("H", sh.h),
            ("W", sh.w),
            ("OC", sh.oc),
            ("OW", sh.ow),
            ("P", sh.p()),
            ("KW", sh.kw),
            ("KHW", sh.kh * sh.kw),
            ("HW", sh.h * sh.w),
            ("K", sh.k()),
            ("SH", sh.sh),
            ("SW", sh.sw),
            ("DH", sh.dh),
            ("DW", sh.dw),
        ] {
            let _ = writeln!(w, "const {name}: u32 = {v}u;");
        }
        let _ = writeln!(w, "const PH: i32 = {}; const PW: i32 = {};", sh.ph, sh.pw);
        w.push_str("struct Meta { w: array<vec4<u32>, 4> };\n");
        let vty = |v: bool| if v { "vec4<f16>" } else { "f16" };
        let xty = if self.raw_x() { "vec2<u32>" } else { vty(self.x_vec) };
        let wty = if self.raw_w() { "vec4<u32>" } else { vty(self.w_vec) };
        let mut bufs = vec![("x", xty, "read"), ("wt", wty, "read")];
        if self.has_bias {
            bufs.push(("bias", if self.bias_f16 { "f16" } else { "f32" }, "read"));
        }
        let oty = if self.pairs { "vec2<f16>" } else { "f16" };
        let oty_out = if self.splitk > 1 { "f32" } else { oty };
        if self.has_res {
            bufs.push(("res", oty, "read"));
        }
        bufs.push(("out", oty_out, "read_write"));
        for (i, (name, ty, access)) in bufs.iter().enumerate() {
            let _ =
                writeln!(w, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
        }
        let _ = writeln!(w, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
        w.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
        w.push_str(self.act.wgsl());
        let ns = self.slabs;
        if self.alias {
            let _ =
                writeln!(w, "var<workgroup> Sh: array<vec2<f32>, {}>;", self.shared_bytes() / 8);
        } else {
            let _ = writeln!(w, "var<workgroup> As: array<vec4<f16>, {}>;", ns * a_stage / 4);
            let _ = writeln!(w, "var<workgroup> Bs: array<vec4<f16>, {}>;", ns * b_stage / 4);
            let _ = writeln!(w, "var<workgroup> Cs: array<f32, {}>;", self.wm * self.wn * s * s);
        }
        let _ = writeln!(w, "@compute @workgroup_size({nt})");
        w.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32");
        if self.emulate {
            // Logical subgroups of `subgroup` consecutive invocations.
            let sg = self.subgroup;
            let _ = writeln!(w, ") {{\n  let sg = tid / {sg}u; let lane = tid % {sg}u;");
        } else {
            w.push_str(",\n        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n");
        }
        w.push_str("  let NCOLS = mw(0u); let xoff = i32(mw(1u)); let woff = mw(2u);\n");
        let _ = writeln!(w, "  let m0 = wid.y * {bm}u; let n0 = wid.x * {bn}u;");
        let wn = self.wn;
        let _ = writeln!(
            w,
            "  let sm = (sg / {wn}u) * {}u; let sn = (sg % {wn}u) * {}u;",
            tm * s,
            tn * s
        );
        // The thread's 4 B columns, decomposed once.
        let _ = writeln!(w, "  let cq = tid % {qb}u; let cb = n0 + cq * 4u; let kr = tid / {qb}u;");
        if self.x_vec {
            // One image's 4 consecutive pixels (P % 4 == 0): its base in halves, or -1.
            w.push_str("  var xv = -1;\n  if (cb < NCOLS) { xv = xoff + i32((cb / P) * CIN * P + cb % P); }\n");
        } else {
            for j in 0..4 {
                let _ = writeln!(
                    w,
                    "  var ih{j} = -1048576; var iw{j} = 0; var xb{j} = 0;\n  {{ let col = cb + {j}u; if (col < NCOLS) {{ let img = col / P; let p = col % P; ih{j} = i32((p / OW) * SH) - PH; iw{j} = i32((p % OW) * SW) - PW; xb{j} = xoff + i32(img * CIN * HW) + ih{j} * i32(W) + iw{j}; }} }}"
                );
                if self.mask && sh.kh * sh.kw > 32 {
                    // Two words for windows of 33-64 taps (the 7×7 stem).
                    let _ = writeln!(
                        w,
                        "  var mk{j} = vec2<u32>();\n  for (var r = 0u; r < KHW; r = r + 1u) {{ if (u32(ih{j} + i32((r / KW) * DH)) < H && u32(iw{j} + i32((r % KW) * DW)) < W) {{ mk{j}[r >> 5u] = mk{j}[r >> 5u] | (1u << (r & 31u)); }} }}"
                    );
                } else if self.mask {
                    let _ = writeln!(
                        w,
                        "  var mk{j} = 0u;\n  for (var r = 0u; r < KHW; r = r + 1u) {{ if (u32(ih{j} + i32((r / KW) * DH)) < H && u32(iw{j} + i32((r % KW) * DW)) < W) {{ mk{j} = mk{j} | (1u << r); }} }}"
                    );
                }
            }
        }
        if self.emulate {
            // All tiles' elements of this lane in one array; `rt` is 1, read from the metadata
            // so the compiler cannot unroll the emulation's loops (lavapipe compiled the
            // unrolled form for ~25 s per kernel).
            let qn = s * s / self.subgroup;
            let _ = writeln!(w, "  var acc = array<f32, {}>();", tm * tn * qn);
            w.push_str("  let rt = min(mw(0u), 1u);\n");
        }
        for i in 0..tm {
            for j in 0..tn {
                if !self.emulate {
                    let _ = writeln!(w, "  var c{i}_{j} = coop_mat{s}x{s}<f32, C>();");
                }
            }
        }
        // Register-held next slab.
        let na = if self.w_vec { bm * (bk / 8) } else { bm * (bk / 4) }.div_ceil(nt);
        let nbv = bk * qb / nt;
        for t in 0..na {
            if self.raw_w() {
                let _ = writeln!(w, "  var ra{t} = vec4<u32>();");
            } else if self.w_vec {
                let _ = writeln!(w, "  var ra{t}l = vec4<f16>(); var ra{t}h = vec4<f16>();");
            } else {
                let _ = writeln!(w, "  var ra{t} = vec4<f16>();");
            }
        }
        let bty = if self.raw_x() { "vec2<u32>" } else { "vec4<f16>" };
        for t in 0..nbv {
            let _ = writeln!(w, "  var rb{t} = {bty}();");
        }
        let load = |k0: &str| self.load(k0, na, nbv);
        let store = |st: &str| self.store(st, na, nbv);
        // This workgroup's K rows: all, or its slice.
        let (kb, ke) = if self.splitk > 1 {
            let ks = sh.k().div_ceil(self.splitk).div_ceil(bk) * bk;
            let _ = writeln!(w, "  let kb = wid.z * {ks}u; let ke = min(K, kb + {ks}u);");
            ("kb", "ke")
        } else {
            ("0u", "K")
        };
        if ns == 2 {
            w.push_str("  {\n");
            w.push_str(&load(kb));
            w.push_str(&store("0u"));
            w.push_str("  }\n  workgroupBarrier();\n  var st = 0u;\n");
            let _ = writeln!(w, "  for (var k0 = {kb}; k0 < {ke}; k0 = k0 + {bk}u) {{");
            let _ = writeln!(w, "    let nxt = k0 + {bk}u; let ot = 1u - st;");
            let _ = writeln!(w, "    if (nxt < {ke}) {{");
            w.push_str(&load("nxt"));
            w.push_str("    }\n");
            let _ = writeln!(w, "    let ab = st * {a_stage}u; let bb = st * {b_stage}u;");
            self.products(&mut w);
            let _ = writeln!(w, "    if (nxt < {ke}) {{");
            w.push_str(&store("ot"));
            w.push_str("    }\n    workgroupBarrier();\n    st = ot;\n  }\n");
        } else {
            // One stage: this step's registers go in at the top, the next step's global loads
            // are issued before the products.
            w.push_str("  {\n");
            w.push_str(&load(kb));
            w.push_str("  }\n");
            let _ = writeln!(w, "  for (var k0 = {kb}; k0 < {ke}; k0 = k0 + {bk}u) {{");
            let _ = writeln!(w, "    let nxt = k0 + {bk}u;");
            w.push_str(&store("0u"));
            let _ = writeln!(w, "    workgroupBarrier();\n    if (nxt < {ke}) {{");
            w.push_str(&load("nxt"));
            w.push_str("    }\n    let ab = 0u; let bb = 0u;\n");
            self.products(&mut w);
            // Also what makes the slab memory free for an aliased scratch after the loop.
            w.push_str("    workgroupBarrier();\n  }\n");
        }
        self.epilogue(&mut w);
        w.push_str("}\n");
        Ok(w)
    }

    /// One slab's products: per K step of `S`, each subgroup's A and B fragments from the
    /// slab stage at `ab` / `bb`, then its `tm × tn` multiply-adds (or `emulate`'s f32 sums).
    fn products(&self, w: &mut String) {
        if self.emulate {
            return self.emulated_products(w);
        }
        let (s, tm, tn) = (self.size, self.tm, self.tn);
        let (as_, bs_) = (self.bk + PAD, self.block_n() + PAD);
        for kk in (0..self.bk).step_by(s as usize) {
            for i in 0..tm {
                let at = self.sa(&format!("(ab + (sm + {}u) * {as_}u + {kk}u) >> 2u", i * s));
                let _ = writeln!(
                    w,
                    "    let a{i}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&{at}, {}u);",
                    as_ / 4
                );
            }
            for j in 0..tn {
                let bt = self.sb(&format!("(bb + {kk}u * {bs_}u + sn + {}u) >> 2u", j * s));
                let _ = writeln!(
                    w,
                    "    let b{j}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&{bt}, {}u);",
                    bs_ / 4
                );
            }
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(
                        w,
                        "    c{i}_{j} = coopMultiplyAdd(a{i}_{kk}, b{j}_{kk}, c{i}_{j});"
                    );
                }
            }
        }
    }

    /// `dst = src[idx]` where `ok`, else zero (`dst` preset to zero): a branch around the
    /// load, or with `clamp` a clamped index and a `select` (no branch, so a thread's loads
    /// issue together).
    fn guarded(&self, dst: &str, arr: &str, idx: &str, ok: &str, zero: &str) -> String {
        if self.clamp {
            format!(
                "{{ let ok = {ok}; {dst} = select({zero}, {arr}[select(0u, {idx}, ok)], ok); }}"
            )
        } else {
            format!("if ({ok}) {{ {dst} = {arr}[{idx}]; }}")
        }
    }

    /// Global loads of the slab starting at K row `k0` into the registers.
    fn load(&self, k0: &str, na: u32, nbv: u32) -> String {
        let (bk, nt) = (self.bk, self.threads());
        let (q8, q4) = (bk / 8, bk / 4);
        let bm = self.block_m();
        let qb = self.block_n() / 4;
        let mut c = String::new();
        for t in 0..na {
            let _ = write!(c, "    {{ let e = tid + {}u;", t * nt);
            let tot = if self.w_vec { bm * (bk / 8) } else { bm * (bk / 4) };
            let inb =
                if tot.is_multiple_of(nt) { String::new() } else { format!("e < {tot}u && ") };
            if self.raw_w() {
                // 8 halves in one 16-byte load (offset and K multiples of 8).
                let _ = writeln!(
                    c,
                    " let m = m0 + e / {q8}u; let k = {k0} + (e % {q8}u) * 8u; ra{t} = vec4<u32>();\n      {} }}",
                    self.guarded(
                        &format!("ra{t}"),
                        "wt",
                        "(woff + m * K + k) >> 3u",
                        &format!("{inb}m < OC && k < K"),
                        "vec4<u32>()"
                    )
                );
            } else if self.w_vec && self.clamp {
                // The clamped index is 0 outside: the weights hold at least 8 halves (K % 8 == 0).
                let _ = writeln!(
                    c,
                    " let m = m0 + e / {q8}u; let k = {k0} + (e % {q8}u) * 8u;\n      let ok = {inb}m < OC && k < K; let at = select(0u, (woff + m * K + k) >> 2u, ok); ra{t}l = select(vec4<f16>(), wt[at], ok); ra{t}h = select(vec4<f16>(), wt[at + 1u], ok); }}"
                );
            } else if self.w_vec {
                let _ = writeln!(
                    c,
                    " let m = m0 + e / {q8}u; let k = {k0} + (e % {q8}u) * 8u; ra{t}l = vec4<f16>(); ra{t}h = vec4<f16>();\n      if ({inb}m < OC && k < K) {{ let at = (woff + m * K + k) >> 2u; ra{t}l = wt[at]; ra{t}h = wt[at + 1u]; }} }}"
                );
            } else if self.clamp {
                let _ = writeln!(
                    c,
                    " let m = m0 + e / {q4}u; let k = {k0} + (e % {q4}u) * 4u; var v = vec4<f16>(); let b = woff + m * K + k;"
                );
                for (i, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    let g = self.guarded(
                        &format!("v.{comp}"),
                        "wt",
                        &format!("b + {i}u"),
                        &format!("{inb}m < OC && k + {i}u < K"),
                        "f16(0.0)",
                    );
                    let _ = writeln!(c, "      {g}");
                }
                let _ = writeln!(c, "      ra{t} = v; }}");
            } else {
                let _ = writeln!(
                    c,
                    " let m = m0 + e / {q4}u; let k = {k0} + (e % {q4}u) * 4u; var v = vec4<f16>();\n      if ({inb}m < OC) {{ let b = woff + m * K + k;"
                );
                for (i, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    let _ = writeln!(c, "        if (k + {i}u < K) {{ v.{comp} = wt[b + {i}u]; }}");
                }
                let _ = writeln!(c, "      }}\n      ra{t} = v; }}");
            }
        }
        let sh = &self.shape;
        for t in 0..nbv {
            let bty = if self.raw_x() { "vec2<u32>" } else { "vec4<f16>" };
            let _ = writeln!(c, "    {{ let k = {k0} + kr + {}u; var v = {bty}();", t * (nt / qb));
            if self.x_vec {
                let g = self.guarded(
                    "v",
                    "x",
                    "u32(xv + i32(k * P)) >> 2u",
                    "k < K && xv >= 0",
                    &format!("{bty}()"),
                );
                let _ = writeln!(c, "      {g}");
            } else if sh.pointwise() {
                c.push_str("      if (k < K) { let ko = i32(k * HW);\n");
                for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    let g = self.guarded(
                        &format!("v.{comp}"),
                        "x",
                        &format!("u32(xb{j} + ko)"),
                        &format!("ih{j} >= 0"),
                        "f16(0.0)",
                    );
                    let _ = writeln!(c, "        {g}");
                }
                c.push_str("      }\n");
            } else if self.mask {
                c.push_str("      if (k < K) { let ic = k / KHW; let r = k % KHW; let ko = i32(ic * HW) + i32((r / KW) * DH) * i32(W) + i32((r % KW) * DW);\n");
                for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    let g = self.guarded(
                        &format!("v.{comp}"),
                        "x",
                        &format!("u32(xb{j} + ko)"),
                        &if sh.kh * sh.kw > 32 {
                            format!(
                                "((select(mk{j}.x, mk{j}.y, r >= 32u) >> (r & 31u)) & 1u) != 0u"
                            )
                        } else {
                            format!("((mk{j} >> r) & 1u) != 0u")
                        },
                        "f16(0.0)",
                    );
                    let _ = writeln!(c, "        {g}");
                }
                c.push_str("      }\n");
            } else {
                c.push_str("      if (k < K) { let ic = k / KHW; let r = k % KHW; let dy = i32((r / KW) * DH); let dx = i32((r % KW) * DW); let ko = i32(ic * HW) + dy * i32(W) + dx;\n");
                for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    let g = self.guarded(
                        &format!("v.{comp}"),
                        "x",
                        &format!("u32(xb{j} + ko)"),
                        &format!("u32(ih{j} + dy) < H && u32(iw{j} + dx) < W"),
                        "f16(0.0)",
                    );
                    let _ = writeln!(c, "        {g}");
                }
                c.push_str("      }\n");
            }
            let _ = writeln!(c, "      rb{t} = v; }}");
        }
        c
    }

    /// Stores of the registers into slab stage `st`.
    fn store(&self, st: &str, na: u32, nbv: u32) -> String {
        let nt = self.threads();
        let (bm, bn) = (self.block_m(), self.block_n());
        let bk = self.bk;
        let (q8, q4) = (bk / 8, bk / 4);
        let (as_, bs_) = (bk + PAD, bn + PAD);
        let (a_stage, b_stage) = (bm * as_, bk * bs_);
        let qb = bn / 4;
        let mut c = String::new();
        for t in 0..na {
            let _ = write!(c, "    {{ let e = tid + {}u;", t * nt);
            let tot = if self.w_vec { bm * (bk / 8) } else { bm * (bk / 4) };
            let open = if tot.is_multiple_of(nt) { "{" } else { "if (e < TOT) {" };
            let open = open.replace("TOT", &format!("{tot}u"));
            if self.raw_w() {
                let _ = writeln!(
                    c,
                    " {open} let at = ({st} * {a_stage}u + (e / {q8}u) * {as_}u + (e % {q8}u) * 8u) >> 2u; {} = bitcast<vec2<f32>>(ra{t}.xy); {} = bitcast<vec2<f32>>(ra{t}.zw); }} }}",
                    self.sa("at"),
                    self.sa("at + 1u")
                );
            } else if self.w_vec {
                let _ = writeln!(
                    c,
                    " {open} let at = ({st} * {a_stage}u + (e / {q8}u) * {as_}u + (e % {q8}u) * 8u) >> 2u; {} {} }} }}",
                    self.put(self.sa("at"), &format!("ra{t}l")),
                    self.put(self.sa("at + 1u"), &format!("ra{t}h"))
                );
            } else {
                let _ = writeln!(
                    c,
                    " {open} {} }} }}",
                    self.put(
                        self.sa(&format!(
                            "({st} * {a_stage}u + (e / {q4}u) * {as_}u + (e % {q4}u) * 4u) >> 2u"
                        )),
                        &format!("ra{t}")
                    )
                );
            }
        }
        for t in 0..nbv {
            let idx =
                format!("({st} * {b_stage}u + (kr + {}u) * {bs_}u + cq * 4u) >> 2u", t * (nt / qb));
            if self.raw_x() {
                let _ = writeln!(c, "    {} = bitcast<vec2<f32>>(rb{t});", self.sb(&idx));
            } else {
                let _ = writeln!(c, "    {}", self.put(self.sb(&idx), &format!("rb{t}")));
            }
        }
        c
    }

    /// The slab's products without cooperative matrices (`emulate`): lane `l` of a logical
    /// subgroup holds elements `l + q·subgroup` of each S×S accumulator tile (row-major) and
    /// sums them from the staged slabs in f32.
    fn emulated_products(&self, w: &mut String) {
        let (s, sg) = (self.size, self.subgroup);
        let bk = self.bk;
        let (as_, bs_) = (bk + PAD, self.block_n() + PAD);
        let h = |arr: &str, i: &str| {
            let v = if arr == "As" {
                self.sa(&format!("({i}) >> 2u"))
            } else {
                self.sb(&format!("({i}) >> 2u"))
            };
            if self.alias {
                format!("unpack2x16float(bitcast<u32>({v}[(({i}) >> 1u) & 1u]))[({i}) & 1u]")
            } else {
                format!("f32({v}[({i}) & 3u])")
            }
        };
        let (tm, tn, qn) = (self.tm, self.tn, s * s / sg);
        let _ = writeln!(w, "    for (var ij = 0u; ij < {}u * rt; ij = ij + 1u) {{ let ti = ij / {tn}u; let tj = ij % {tn}u;", tm * tn);
        let _ = writeln!(w, "      for (var q = 0u; q < {qn}u * rt; q = q + 1u) {{ let e = lane + q * {sg}u; let r = e / {s}u; let cc = e % {s}u; var sum = acc[ij * {qn}u + q];");
        let _ = writeln!(w, "        for (var t = 0u; t < {bk}u * rt; t = t + 1u) {{ let ha = ab + (sm + ti * {s}u + r) * {as_}u + t; let hb = bb + t * {bs_}u + sn + tj * {s}u + cc;");
        let _ = writeln!(w, "          sum = sum + {} * {}; }}", h("As", "ha"), h("Bs", "hb"));
        let _ = writeln!(w, "        acc[ij * {qn}u + q] = sum; }} }}");
    }
}
