//! Matrix-multiply kernels rendered from a [`MatmulSpec`] (tiled GEMM) or a [`GemvSpec`]
//! (one row times a matrix).
//!
//! GEMM techniques: a 128×128 (or 64×64 for small problems) output tile per 256-thread
//! workgroup, K staged 8 at a time in `var<workgroup>` memory (A stored K-major so both operands
//! are read as `vec4` rows), register tiling (each thread accumulates 8×8 or 4×4 outputs in
//! `vec4` registers, fully unrolled in the generated text), register prefetch of the next K-slab
//! while the current one is multiplied, 128-bit `vec4` global loads specialised by source for
//! the operand's contiguous axis (K or M for A, K or N for B: transposed views need no copy),
//! a scalar strided path for any other layout, f16 operands unpacked from u32 words with f32
//! accumulation, broadcast batch dims from metadata, bounds checks at every edge, a `vec4`
//! store epilogue when N is a multiple of 4, an optional `alpha·AB + beta·C` epilogue
//! (ONNX Gemm / linear / conv bias) with C read through broadcast strides, and an optional
//! activation applied to the result before it is stored ([`MatmulAct`]: the graph engine's
//! Conv/Gemm + Relu/LeakyRelu/Clip fusion), after an optional residual tensor added elementwise
//! (ResNet's `Conv -> Add -> Relu`), so neither costs an extra pass over memory.
//!
//! GEMV techniques: 256 threads split into column groups × K lanes (lanes along the operand's
//! contiguous axis so loads coalesce), 4-way unrolled independent loads, and a workgroup-memory
//! tree reduction over the K lanes.

use crate::matmul_sk::SK_META_WORDS;
use crate::matmul_tune::{k_loop_tuned, GemmTune};
use mpsrt_core::DType;
use std::fmt::Write;

/// How one operand's tile is fetched from global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperandLoad {
    /// Scalar loads through both strides (any layout, f16).
    Scalar,
    /// `vec4` loads along K (A row-major, or B transposed).
    VecK,
    /// `vec4` loads along M (A transposed) or N (B row-major).
    VecMN,
}

/// An activation the GEMM applies while storing (parameters in meta words 3 and 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MatmulAct {
    #[default]
    None,
    /// `x < 0 ? 0 : x` (NaN passes through, as the elementwise Relu).
    Relu,
    /// `x < 0 ? x * p0 : x`.
    LeakyRelu,
    /// `min(max(x, p0), p1)`, as the elementwise Clip.
    Clip,
    /// `clamp(x * p0 + p1, 0, 1)`, as the elementwise HardSigmoid.
    HardSigmoid,
    /// `x * clamp(x * p0 + p1, 0, 1)` (p0 = 1/6, p1 = 0.5), as the elementwise HardSwish.
    HardSwish,
    /// `1 / (1 + exp(-x))`, evaluated without overflow as the elementwise Sigmoid.
    Sigmoid,
    /// `x * sigmoid(x)` (SiLU / Swish with alpha 1).
    Silu,
    /// Exact GELU, `0.5 x (1 + erf(x / √2))` (BERT's FFN; `erf` as the elementwise Erf
    /// computes it). Linear-layer epilogues only: the direct conv kernels have no code for it
    /// ([`MatmulAct::direct_code`]).
    Gelu,
    /// GELU's tanh form, `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    GeluTanh,
}

/// Overflow-free vector sigmoid (`exp` of a non-positive argument only), the elementwise
/// Sigmoid's arithmetic; the Sigmoid and Silu epilogues call it.
macro_rules! sigm_fn {
    () => {
        "fn sigm(v: vec4<f32>) -> vec4<f32> { let e = exp(-abs(v)); return select(e, vec4<f32>(1.0), v >= vec4<f32>(0.0)) / (vec4<f32>(1.0) + e); }\n"
    };
}

/// Vector `erf` with the elementwise Erf's arithmetic (`h_erf` in `elementwise.rs`): the odd
/// series below 0.5, Abramowitz–Stegun 7.1.26 above (absolute error ≤ 1.5e-7).
macro_rules! erf_fn {
    () => {
        concat!(
            "fn erf4(x: vec4<f32>) -> vec4<f32> {\n",
            "  let a = abs(x); let x2 = x * x;\n",
            "  let small = 1.1283791671 * x * (1.0 + x2 * (-0.33333333 + x2 * (0.1 + x2 * (-0.023809524 + x2 * (0.0046296296 - x2 * 0.00075757576)))));\n",
            "  let t = 1.0 / (1.0 + 0.3275911 * a);\n",
            "  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);\n",
            "  return select(select(y, -y, x < vec4<f32>(0.0)), small, a < vec4<f32>(0.5));\n}\n"
        )
    };
}

/// Vector `tanh` with the elementwise Tanh's arithmetic (`h_tanh`): a series near 0, else
/// `(1 - e^{-2|x|}) / (1 + e^{-2|x|})` with the sign (no overflow).
macro_rules! tanh_fn {
    () => {
        concat!(
            "fn tanh4(x: vec4<f32>) -> vec4<f32> {\n",
            "  let a = abs(x); let x2 = x * x;\n",
            "  let small = x * (1.0 + x2 * (-0.33333333 + x2 * (0.13333333 + x2 * (-0.053968254 + x2 * 0.021869488))));\n",
            "  let t = exp(-2.0 * a);\n",
            "  return select(sign(x) * (1.0 - t) / (1.0 + t), small, a < vec4<f32>(0.125));\n}\n"
        )
    };
}

impl MatmulAct {
    /// WGSL of `fn act(v: vec4<f32>) -> vec4<f32>` (`p0`/`p1` from meta words 3 and 15).
    pub(crate) fn wgsl(self) -> &'static str {
        match self {
            MatmulAct::None => "fn act(v: vec4<f32>) -> vec4<f32> { return v; }\n",
            MatmulAct::Relu => {
                "fn act(v: vec4<f32>) -> vec4<f32> { return select(v, vec4<f32>(0.0), v < vec4<f32>(0.0)); }\n"
            }
            MatmulAct::LeakyRelu => {
                "fn act(v: vec4<f32>) -> vec4<f32> { return select(v, v * bitcast<f32>(mw(3u)), v < vec4<f32>(0.0)); }\n"
            }
            MatmulAct::Clip => {
                "fn act(v: vec4<f32>) -> vec4<f32> { return min(max(v, vec4<f32>(bitcast<f32>(mw(3u)))), vec4<f32>(bitcast<f32>(mw(15u)))); }\n"
            }
            MatmulAct::HardSigmoid => {
                "fn act(v: vec4<f32>) -> vec4<f32> { return max(vec4<f32>(0.0), min(vec4<f32>(1.0), v * bitcast<f32>(mw(3u)) + bitcast<f32>(mw(15u)))); }\n"
            }
            MatmulAct::HardSwish => {
                "fn act(v: vec4<f32>) -> vec4<f32> { return v * max(vec4<f32>(0.0), min(vec4<f32>(1.0), v * bitcast<f32>(mw(3u)) + bitcast<f32>(mw(15u)))); }\n"
            }
            MatmulAct::Sigmoid => {
                concat!(sigm_fn!(), "fn act(v: vec4<f32>) -> vec4<f32> { return sigm(v); }\n")
            }
            MatmulAct::Silu => {
                concat!(sigm_fn!(), "fn act(v: vec4<f32>) -> vec4<f32> { return v * sigm(v); }\n")
            }
            MatmulAct::Gelu => concat!(
                erf_fn!(),
                "fn act(v: vec4<f32>) -> vec4<f32> { return 0.5 * v * (vec4<f32>(1.0) + erf4(v * 0.70710678118654752)); }\n"
            ),
            MatmulAct::GeluTanh => concat!(
                tanh_fn!(),
                "fn act(v: vec4<f32>) -> vec4<f32> { return 0.5 * v * (vec4<f32>(1.0) + tanh4(0.7978845608028654 * (v + 0.044715 * v * v * v))); }\n"
            ),
        }
    }

    /// The activation's code in the direct conv kernels' metadata (`conv.wgsl` `direct_act`,
    /// the depthwise+pool and 1×1-GEMV kernels): `None` for the GELUs, which only the GEMM
    /// epilogues (rendered from `MatmulAct::wgsl`) apply — those paths apply them after.
    pub fn direct_code(self) -> Option<u32> {
        Some(match self {
            MatmulAct::None => 0,
            MatmulAct::Relu => 1,
            MatmulAct::LeakyRelu => 2,
            MatmulAct::Clip => 3,
            MatmulAct::HardSigmoid => 4,
            MatmulAct::HardSwish => 5,
            MatmulAct::Sigmoid => 6,
            MatmulAct::Silu => 7,
            MatmulAct::Gelu | MatmulAct::GeluTanh => return None,
        })
    }
}

/// Everything that determines a tiled GEMM kernel's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    /// F32 or F16 (both operands).
    pub dtype: DType,
    /// Output block, stages and thread layout (`GemmTune::legacy(64 | 128)`: the square
    /// single-stage kernel).
    pub tune: GemmTune,
    pub a: OperandLoad,
    pub b: OperandLoad,
    /// Epilogue `alpha * AB + beta * C` with C bound at 2.
    pub has_c: bool,
    /// N % 4 == 0: store `vec4`s.
    pub vec_out: bool,
    /// Rank of the (coalesced) broadcast batch dims.
    pub batch_dims: usize,
    /// Activation applied before the store.
    pub act: MatmulAct,
    /// Add a residual `res` (bound after C; contiguous like the output) before the activation:
    /// a conv followed by a ResNet-style `Add` in one kernel.
    pub has_res: bool,
}

/// A GEMV kernel: `out[z, n] = alpha * sum_k A[z, k] * B[z, k, n]` (`+ beta * C[n]` with
/// `has_c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemvSpec {
    pub dtype: DType,
    /// B is contiguous along K (lanes walk K); else along N (threads walk N).
    pub k_contig: bool,
    pub batch_dims: usize,
    /// `+ beta * C[offC + n * scn]` (f32 C bound at 2; one row: a classifier's bias), so a
    /// batch-1 Gemm with a bias stays on this kernel instead of a one-row tiled GEMM.
    pub has_c: bool,
}

/// Metadata words before the batch dims.
pub const MATMUL_META_HEAD: usize = 16;

/// The metadata block shared by both kernels: `[M, N, K, p0, offA, offB, sam, sak, sbk, sbn,
/// alpha, beta, offC, scm, scn, p1]`, then batch shape, A batch strides, B batch strides
/// (`p0`/`p1`: the activation's parameters, zero here; set words 3 and 15 to pass them).
#[allow(clippy::too_many_arguments)]
pub fn matmul_meta(
    mnk: [usize; 3],
    offs: [usize; 3],
    a_strides: [isize; 2],
    b_strides: [isize; 2],
    c_strides: [isize; 2],
    alpha: f32,
    beta: f32,
    batch: (&[usize], &[isize], &[isize]),
) -> Vec<u32> {
    let i = |x: isize| x as i32 as u32;
    let mut w = vec![
        mnk[0] as u32,
        mnk[1] as u32,
        mnk[2] as u32,
        0,
        offs[0] as u32,
        offs[1] as u32,
        i(a_strides[0]),
        i(a_strides[1]),
        i(b_strides[0]),
        i(b_strides[1]),
        alpha.to_bits(),
        beta.to_bits(),
        offs[2] as u32,
        i(c_strides[0]),
        i(c_strides[1]),
        0,
    ];
    w.extend(batch.0.iter().map(|&d| d as u32));
    w.extend(batch.1.iter().map(|&s| i(s)));
    w.extend(batch.2.iter().map(|&s| i(s)));
    w
}

/// The metadata accessors every GEMM kernel (tiled and cooperative) declares after its
/// `M: Meta` uniform: `mw(i)` (word `i`), `mi(i)` (word `i` as i32) and `boffs(z)` (the A and
/// B element offsets of flattened batch index `z` over `nb` broadcast batch dims, from the
/// batch shape and strides after the [`MATMUL_META_HEAD`] words).
pub(crate) fn meta_fns(s: &mut String, nb: usize) {
    s.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
    s.push_str("fn mi(i: u32) -> i32 { return bitcast<i32>(mw(i)); }\n");
    let h = MATMUL_META_HEAD;
    s.push_str("fn boffs(z: u32) -> vec2<i32> {\n  var rem = z; var oa = 0; var ob = 0;\n");
    for d in (0..nb).rev() {
        let _ = writeln!(
            s,
            "  {{ let sz = mw({}u); let c = i32(rem % sz); rem = rem / sz; oa = oa + c * mi({}u); ob = ob + c * mi({}u); }}",
            h + d,
            h + nb + d,
            h + 2 * nb + d
        );
    }
    s.push_str("  return vec2<i32>(oa, ob);\n}\n");
}

/// Declarations of a GEMM module: `Meta` (the head, the batch words and `extra` words after
/// them), the bindings in order (`out` and the stream-K workspace `ws` writable), the meta
/// accessors and the scalar loaders of the operands `a` and `b`.
pub(crate) fn header(s: &mut String, nb: usize, extra: usize, bufs: &[(&str, &str)], dtype: DType) {
    let words = (MATMUL_META_HEAD + 3 * nb + extra).div_ceil(4);
    let _ = writeln!(s, "struct Meta {{ w: array<vec4<u32>, {words}> }};");
    for (i, (name, ty)) in bufs.iter().enumerate() {
        let access = if matches!(*name, "out" | "ws") { "read_write" } else { "read" };
        let _ = writeln!(s, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
    }
    let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
    meta_fns(s, nb);
    for (name, ty) in bufs.iter().take(2) {
        if ty.starts_with("vec4") || !matches!(*name, "a" | "b") {
            continue;
        }
        let ld = if dtype == DType::F16 {
            format!("unpack2x16float({name}[u32(e) >> 1u])[u32(e) & 1u]")
        } else {
            format!("{name}[u32(e)]")
        };
        let _ = writeln!(s, "fn ld_{name}(e: i32) -> f32 {{ return {ld}; }}");
    }
}

/// The K loop shared by the tiled kernels (this GEMM and `conv_gemm.rs`): `gm × gn` blocks of
/// 64×64 outputs per 256-thread workgroup (thread `(tx, ty)` = `(tid % 16, tid / 16)` holds
/// rows `gi·64 + ty·4 + i` and columns `h·64 + tx·4 ..+4` in the named registers
/// `c{gi}_{i}_{h}`, declared here), K staged 8 at a time in `As` / `Bs` (`qa` / `qb` vec4s per
/// K row). `load` fetches the slab at `k0n` into registers; `store` writes them to workgroup
/// memory; the next slab is fetched while the current one is multiplied. Fully unrolled:
/// runtime-indexed register arrays would spill to local memory on NVIDIA.
pub(crate) fn k_loop(
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
    let _ = write!(s, "  {{ let k0n = 0u;\n{load}  }}\n");
    s.push_str("  for (var k0 = 0u; k0 < K; k0 = k0 + 8u) {\n");
    s.push_str(store);
    s.push_str("    workgroupBarrier();\n");
    let _ = write!(s, "    if (k0 + 8u < K) {{ let k0n = k0 + 8u;\n{load}    }}\n");
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

impl MatmulSpec {
    /// Render the WGSL source; fails for combinations the launcher never asks for.
    pub fn render(&self) -> Result<String, String> {
        self.render_out(false)
    }

    /// [`render`](Self::render) with the output stored at strides from the meta instead of
    /// contiguous `[batch.., M, N]`: word `MATMUL_META_HEAD + 3·nb` is the row stride, the `nb`
    /// words after it the (coalesced) batch strides; columns stay unit-stride (`vec_out` needs
    /// every stride a multiple of 4). Attention's `p·v` writes `[B, S, H, D]` this way, so the
    /// heads' transpose + merge after it is a view. No stream-K or residual (both index the
    /// output contiguously).
    pub fn render_strided_out(&self) -> Result<String, String> {
        if self.tune.sk || self.has_res {
            return Err("strided output: no stream-K or residual".into());
        }
        self.render_out(true)
    }

    fn render_out(&self, strided: bool) -> Result<String, String> {
        if !matches!(self.dtype, DType::F32 | DType::F16) {
            return Err(format!("matmul kernels take f32 or f16, got {}", self.dtype));
        }
        self.tune.check()?;
        if self.dtype == DType::F16
            && (self.a != OperandLoad::Scalar || self.b != OperandLoad::Scalar)
        {
            return Err("f16 operands use scalar loads".into());
        }
        let tune = self.tune;
        let (bm, bn) = (tune.bm, tune.bn);
        let (gm, gn) = ((bm / 64) as usize, (bn / 64) as usize);
        // vec4s per K-row of each operand's slab; two stages when double-buffered.
        let (qa, qb) = (bm / 4, bn / 4);
        let stages = if tune.db { 2 } else { 1 };
        let ks = tune.k_step();
        let mut s = String::with_capacity(16384);
        let _ = writeln!(s, "// generated by mpsrt-kernels: matmul {self:?}");
        let sty = |l: OperandLoad| match (self.dtype, l) {
            (DType::F16, _) => "u32",
            (_, OperandLoad::Scalar) => "f32",
            _ => "vec4<f32>",
        };
        let mut bufs = vec![("a", sty(self.a)), ("b", sty(self.b))];
        if self.has_c {
            bufs.push(("cin", "f32"));
        }
        if self.has_res {
            bufs.push(("res", "f32"));
        }
        bufs.push(("out", if self.vec_out { "vec4<f32>" } else { "f32" }));
        if tune.sk {
            bufs.push(("ws", "vec4<f32>"));
        }
        header(
            &mut s,
            self.batch_dims,
            if self.tune.sk {
                SK_META_WORDS
            } else if strided {
                1 + self.batch_dims
            } else {
                0
            },
            &bufs,
            self.dtype,
        );
        s.push_str(self.act.wgsl());
        let _ = writeln!(s, "var<workgroup> As: array<vec4<f32>, {}>;", ks * qa * stages);
        let _ = writeln!(s, "var<workgroup> Bs: array<vec4<f32>, {}>;", ks * qb * stages);
        s.push_str("@compute @workgroup_size(256)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n");
        s.push_str("  let M = mw(0u); let N = mw(1u); let K = mw(2u);\n");
        s.push_str("  let sam = mi(6u); let sak = mi(7u); let sbk = mi(8u); let sbn = mi(9u);\n");
        s.push_str("  let alpha = bitcast<f32>(mw(10u)); let beta = bitcast<f32>(mw(11u));\n");
        s.push_str(tune.coords());
        // A 16-deep slab is two 8-deep halves, each fetched and stored like the 8-deep one.
        let (mut decls, mut load, mut store) = (String::new(), String::new(), String::new());
        for h in 0..ks / 8 {
            for (x, l) in [('a', self.a), ('b', self.b)] {
                let (decl, ld, st) = self.operand_code(x, l, h);
                decls.push_str(&decl);
                load.push_str(&ld);
                store.push_str(&st);
            }
        }
        if tune.sk {
            // Stream-K: the segment loop (tile, K range, partial or whole) around the K loop.
            crate::matmul_sk::segment_head(&mut s, self);
            s.push_str(&decls);
            let kr = ("kb0", "ke0");
            k_loop_tuned(&mut s, tune, (gm, gn), (qa, qb), kr, &load, &store);
            crate::matmul_sk::segment_tail(&mut s, self);
            s.push_str("}\n");
            return Ok(s);
        }
        s.push_str("  let bo = boffs(wid.z);\n");
        s.push_str("  let abase = mi(4u) + bo.x; let bbase = mi(5u) + bo.y;\n");
        let _ = writeln!(s, "  let m0 = wid.y * {bm}u; let n0 = wid.x * {bn}u;");
        s.push_str(&decls);
        if tune.db || ks != 8 {
            k_loop_tuned(&mut s, tune, (gm, gn), (qa, qb), ("0u", "K"), &load, &store);
        } else {
            k_loop(&mut s, (gm, gn), (qa, qb), &load, &store);
        }
        if strided {
            // The output offset of batch `z`, decomposed as `boffs` does it.
            let (h, nb) = (MATMUL_META_HEAD, self.batch_dims);
            s.push_str("  var rem = wid.z; var obase = 0u;\n");
            for d in (0..nb).rev() {
                let (sz, st) = (h + d, h + 3 * nb + 1 + d);
                let _ = writeln!(
                    s,
                    "  {{ let sz = mw({sz}u); obase = obase + (rem % sz) * mw({st}u); rem = rem / sz; }}"
                );
            }
            let _ = writeln!(s, "  let ldo = mw({}u);", h + 3 * nb);
            let mut e = String::new();
            self.epilogue(&mut e);
            s.push_str(&e.replace("m * N + n", "m * ldo + n"));
        } else {
            s.push_str("  let obase = wid.z * M * N;\n");
            self.epilogue(&mut s);
        }
        s.push_str("}\n");
        Ok(s)
    }

    /// The whole-tile epilogue: each thread's `c{gi}_{i}_{h}` registers through
    /// [`store_code`](Self::store_code) (`m0`, `n0`, `obase`, `alpha`, `beta` in scope).
    pub(crate) fn epilogue(&self, s: &mut String) {
        let (gm, gn) = (self.tune.bm / 64, self.tune.bn / 64);
        for gi in 0..gm {
            for i in 0..4 {
                for h in 0..gn {
                    let _ = writeln!(
                        s,
                        "  {{ let m = m0 + {}u + ty * 4u; let n = n0 + {}u + tx * 4u;",
                        gi * 64 + i,
                        h * 64
                    );
                    s.push_str(&self.store_code(&format!("c{gi}_{i}_{h}")));
                    s.push_str("  }\n");
                }
            }
        }
    }

    /// Stores the four outputs `acc` (a vec4 expression) at row `m`, columns `n ..n + 4`:
    /// `alpha·acc (+ beta·C) (+ residual)`, the activation, bounds by M and N.
    pub(crate) fn store_code(&self, acc: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "    if (m < M) {{\n      var v = {acc} * alpha;");
        if self.has_c {
            s.push_str("      for (var c = 0u; c < 4u; c = c + 1u) { if (n + c < N) { v[c] = v[c] + beta * cin[u32(mi(12u) + i32(m) * mi(13u) + i32(n + c) * mi(14u))]; } }\n");
        }
        if self.has_res {
            s.push_str("      for (var c = 0u; c < 4u; c = c + 1u) { if (n + c < N) { v[c] = v[c] + res[obase + m * N + n + c]; } }\n");
        }
        if self.act != MatmulAct::None {
            s.push_str("      v = act(v);\n");
        }
        if self.vec_out {
            s.push_str("      if (n < N) { out[(obase + m * N + n) >> 2u] = v; }\n");
        } else {
            s.push_str("      for (var c = 0u; c < 4u; c = c + 1u) { if (n + c < N) { out[obase + m * N + n + c] = v[c]; } }\n");
        }
        s.push_str("    }\n");
        s
    }

    /// Register declarations, the global→register prefetch (uses `k0n`) and the
    /// register→workgroup store for operand `x` ('a' or 'b'), for the 8-deep half `h` of the
    /// slab (K rows `8h .. 8h + 8`; 0 for 8-deep slabs).
    fn operand_code(&self, x: char, load: OperandLoad, h: u32) -> (String, String, String) {
        // This operand's rows per block (the slab is 8 K-rows of `t` values, `q` vec4s each);
        // `so` the stage offset the double-buffered loop declares.
        let t = if x == 'a' { self.tune.bm } else { self.tune.bn };
        let q = t / 4;
        let sh = if x == 'a' { "As" } else { "Bs" };
        let mut so = match (self.tune.db, x) {
            (false, _) => String::new(),
            (true, 'a') => "so_a + ".to_string(),
            (true, _) => "so_b + ".to_string(),
        };
        // The second half: its own registers, K rows and slab rows.
        let (p, k0n) = if h == 0 {
            (format!("p{x}"), "k0n".to_string())
        } else {
            let _ = write!(so, "{}u + ", 8 * q * h);
            (format!("p{x}{h}_"), format!("(k0n + {}u)", 8 * h))
        };
        // (row bound, row stride, k stride) names for this operand.
        let (lim, srow, sk, base) =
            if x == 'a' { ("M", "sam", "sak", "abase") } else { ("N", "sbn", "sbk", "bbase") };
        let r0 = if x == 'a' { "m0" } else { "n0" };
        let (mut decl, mut ld, mut st) = (String::new(), String::new(), String::new());
        match load {
            OperandLoad::Scalar => {
                let per = t / 32;
                for j in 0..per {
                    let _ = writeln!(decl, "  var {p}{j} = 0.0;");
                    // A: k fastest (row-major A); B: n fastest (row-major B).
                    let (row, k) = if x == 'a' {
                        (format!("(tid + {}u) / 8u", 256 * j), format!("(tid + {}u) % 8u", 256 * j))
                    } else {
                        (
                            format!("(tid + {}u) % {t}u", 256 * j),
                            format!("(tid + {}u) / {t}u", 256 * j),
                        )
                    };
                    let _ = writeln!(
                        ld,
                        "    {{ let r = {r0} + {row}; let k = {k0n} + {k}; {p}{j} = 0.0; if (r < {lim} && k < K) {{ {p}{j} = ld_{x}({base} + i32(r) * {srow} + i32(k) * {sk}); }} }}"
                    );
                    let _ = writeln!(
                        st,
                        "    {{ let r = {row}; let k = {k}; {sh}[{so}k * {q}u + (r >> 2u)][r & 3u] = {p}{j}; }}"
                    );
                }
            }
            OperandLoad::VecK => {
                // T rows × 2 vec4 along K: one per thread (128) or half the threads (64).
                let guard = if t == 128 { "true".to_string() } else { format!("tid < {}u", 2 * t) };
                let _ = writeln!(decl, "  var {p} = vec4<f32>(0.0);");
                let _ = writeln!(
                    ld,
                    "    if ({guard}) {{ let r = {r0} + tid / 2u; let k = {k0n} + (tid % 2u) * 4u; {p} = vec4<f32>(0.0); if (r < {lim} && k < K) {{ {p} = {x}[u32({base} + i32(r) * {srow} + i32(k)) >> 2u]; }} }}"
                );
                let _ = writeln!(
                    st,
                    "    if ({guard}) {{ let r = tid / 2u; let k = (tid % 2u) * 4u;\n      for (var c = 0u; c < 4u; c = c + 1u) {{ {sh}[{so}(k + c) * {q}u + (r >> 2u)][r & 3u] = {p}[c]; }} }}"
                );
            }
            OperandLoad::VecMN => {
                // 8 K-rows × T/4 vec4 along the row axis.
                let guard = if t == 128 { "true".to_string() } else { format!("tid < {}u", 2 * t) };
                let _ = writeln!(decl, "  var {p} = vec4<f32>(0.0);");
                let _ = writeln!(
                    ld,
                    "    if ({guard}) {{ let k = {k0n} + tid / {q}u; let r = {r0} + (tid % {q}u) * 4u; {p} = vec4<f32>(0.0); if (r < {lim} && k < K) {{ {p} = {x}[u32({base} + i32(r) * {srow} + i32(k) * {sk}) >> 2u]; }} }}"
                );
                let _ = writeln!(st, "    if ({guard}) {{ {sh}[{so}tid] = {p}; }}");
            }
        }
        (decl, ld, st)
    }
}

impl GemvSpec {
    /// Render the WGSL source.
    pub fn render(&self) -> Result<String, String> {
        if !matches!(self.dtype, DType::F32 | DType::F16) {
            return Err(format!("matmul kernels take f32 or f16, got {}", self.dtype));
        }
        let (cols, lanes) = if self.k_contig { (8u32, 32u32) } else { (32, 8) };
        let mut s = String::with_capacity(4096);
        let _ = writeln!(s, "// generated by mpsrt-kernels: gemv {self:?}");
        let ty = if self.dtype == DType::F16 { "u32" } else { "f32" };
        let mut bufs = vec![("a", ty), ("b", ty)];
        if self.has_c {
            bufs.push(("c", "f32"));
        }
        bufs.push(("out", "f32"));
        header(&mut s, self.batch_dims, 0, &bufs, self.dtype);
        s.push_str("var<workgroup> sh: array<f32, 256>;\n");
        s.push_str("@compute @workgroup_size(256)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n");
        s.push_str("  let N = mw(1u); let K = mw(2u);\n  let bo = boffs(wid.z);\n");
        s.push_str("  let abase = mi(4u) + bo.x; let bbase = mi(5u) + bo.y;\n");
        s.push_str("  let sak = mi(7u); let sbk = mi(8u); let sbn = mi(9u);\n");
        if self.k_contig {
            let _ = writeln!(s, "  let lane = tid % {lanes}u; let col = tid / {lanes}u;");
        } else {
            let _ = writeln!(s, "  let col = tid % {cols}u; let lane = tid / {cols}u;");
        }
        let _ = writeln!(s, "  let n = wid.x * {cols}u + col;");
        s.push_str("  var s0 = 0.0; var s1 = 0.0; var s2 = 0.0; var s3 = 0.0;\n");
        s.push_str("  if (n < N) {\n    let bn = bbase + i32(n) * sbn;\n    var k = lane;\n");
        let _ = writeln!(s, "    loop {{\n      if (k + {}u >= K) {{ break; }}", 3 * lanes);
        for u in 0..4 {
            let _ = writeln!(
                s,
                "      s{u} = fma(ld_a(abase + i32(k + {o}u) * sak), ld_b(bn + i32(k + {o}u) * sbk), s{u});",
                o = u * lanes
            );
        }
        let _ = writeln!(s, "      k = k + {}u;\n    }}", 4 * lanes);
        let _ = writeln!(
            s,
            "    for (; k < K; k = k + {lanes}u) {{ s0 = fma(ld_a(abase + i32(k) * sak), ld_b(bn + i32(k) * sbk), s0); }}\n  }}"
        );
        s.push_str("  sh[tid] = (s0 + s1) + (s2 + s3);\n  workgroupBarrier();\n");
        let stride = if self.k_contig { 1 } else { cols };
        let _ = writeln!(
            s,
            "  for (var st = {}u; st > 0u; st = st >> 1u) {{\n    if (lane < st) {{ sh[tid] = sh[tid] + sh[tid + st * {stride}u]; }}\n    workgroupBarrier();\n  }}",
            lanes / 2
        );
        let bias = if self.has_c {
            " + bitcast<f32>(mw(11u)) * c[u32(mi(12u) + i32(n) * mi(14u))]"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  if (lane == 0u && n < N) {{ out[wid.z * N + n] = sh[tid] * bitcast<f32>(mw(10u)){bias}; }}\n}}"
        );
        Ok(s)
    }
}

/// The reduction after a split-K product:
/// `out[e] = act(sum_j part[j·total + e] + bias[e / N] + res[e])`, one thread per output — the
/// partial sums, the conv's bias, its residual and its activation in one pass instead of a
/// reduction plus up to three elementwise passes.
///
/// Bindings: `part`, then `bias` and `res` when present, `out`, the uniform meta. Meta words:
/// 0 total (M·N), 1 N, 2 slices, 3 activation p0, 4 grid row width in threads, 5 bias offset,
/// 15 activation p1 (the words [`MatmulAct`] reads).
pub fn splitk_reduce_kernel(has_bias: bool, has_res: bool, act: MatmulAct) -> String {
    reduce_src(has_bias.then_some("  v += bias[mw(5u) + e / mw(1u)];\n"), has_res, act)
}

/// The reduction after a split-K tiled GEMM (`gpu/matmul.rs`: the K slices run as an extra,
/// outermost batch dim of one GEMM dispatch, partials `[S, batch.., M, N]`):
/// `out[e] = act(sum_j part[j·total + e] + beta·C[offC + m·scm + n·scn] + res[e])` with
/// `m = (e / N) % M`, `n = e % N` — the GEMM's own epilogue (C through broadcast strides, as
/// [`MatmulSpec`]'s `has_c`), applied once to the summed slices.
///
/// Bindings: `part`, then `cin` and `res` when present, `out`, the uniform meta. Meta words: as
/// [`splitk_reduce_kernel`] (0 total, 1 N, 2 slices, 3 p0, 4 grid row width, 5 C offset, 15 p1),
/// plus 6 beta, 7 C's row stride, 8 C's column stride (both `i32`), 9 M.
pub fn gemm_splitk_reduce_kernel(has_c: bool, has_res: bool, act: MatmulAct) -> String {
    let c = "  { let n = e % mw(1u); let m = (e / mw(1u)) % mw(9u);\n    v += bitcast<f32>(mw(6u)) * cin[u32(i32(mw(5u)) + i32(m) * bitcast<i32>(mw(7u)) + i32(n) * bitcast<i32>(mw(8u)))]; }\n";
    reduce_src(has_c.then_some(c), has_res, act)
}

/// What every split-K reduction starts with: the 16-word meta, `bufs` (name, access, element
/// type) as storage bindings 0.. with the uniform after them, `mw`, `act` and the header of a
/// 256-thread `main` over `gid`. Shared by `reduce_src` and the vec4 form
/// (`matmul_reduce4.rs`), which bind the same buffers in the same order.
pub(crate) fn reduce_prelude(s: &mut String, bufs: &[(&str, &str, &str)], act: MatmulAct) {
    s.push_str("struct Meta { w: array<vec4<u32>, 4> };\n");
    for (i, (name, access, ty)) in bufs.iter().enumerate() {
        let _ = writeln!(s, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
    }
    let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
    s.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
    s.push_str(act.wgsl());
    s.push_str(
        "@compute @workgroup_size(256)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n",
    );
}

/// The split-K reduction's source; `c_code` adds the bias / C term to `v` (binding `bias` for
/// the conv's per-row bias, `cin` for the GEMM's C: the name is taken from the code).
fn reduce_src(c_code: Option<&str>, has_res: bool, act: MatmulAct) -> String {
    let mut s = String::with_capacity(1024);
    let _ = writeln!(
        s,
        "// generated by mpsrt-kernels: split-K reduce c={c_code:?} res={has_res} {act:?}"
    );
    let mut bufs = vec![("part", "read", "f32")];
    if let Some(c) = c_code {
        bufs.push((if c.contains("cin[") { "cin" } else { "bias" }, "read", "f32"));
    }
    if has_res {
        bufs.push(("res", "read", "f32"));
    }
    bufs.push(("out", "read_write", "f32"));
    reduce_prelude(&mut s, &bufs, act);
    s.push_str(
        "  let e = gid.x + gid.y * mw(4u); let total = mw(0u);\n  if (e >= total) { return; }\n",
    );
    s.push_str(
        "  var v = 0.0;\n  for (var j = 0u; j < mw(2u); j++) { v += part[j * total + e]; }\n",
    );
    if let Some(c) = c_code {
        s.push_str(c);
    }
    if has_res {
        s.push_str("  v += res[e];\n");
    }
    s.push_str("  out[e] = act(vec4<f32>(v)).x;\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_matmul_variant_validates_and_translates_to_msl() {
        use OperandLoad::*;
        for dtype in [DType::F32, DType::F16] {
            for tune in [GemmTune::legacy(64), GemmTune::legacy(128)] {
                for a in [Scalar, VecK, VecMN] {
                    for b in [Scalar, VecK, VecMN] {
                        for (has_c, vec_out, batch_dims, act, has_res) in [
                            (false, true, 0, MatmulAct::None, false),
                            (true, false, 2, MatmulAct::Relu, true),
                            (true, true, 1, MatmulAct::LeakyRelu, false),
                            (false, false, 0, MatmulAct::Clip, true),
                            (true, true, 1, MatmulAct::Gelu, true),
                            (true, false, 0, MatmulAct::GeluTanh, false),
                        ] {
                            let spec = MatmulSpec {
                                dtype,
                                tune,
                                a,
                                b,
                                has_c,
                                vec_out,
                                batch_dims,
                                act,
                                has_res,
                            };
                            let Ok(src) = spec.render() else { continue };
                            crate::validate::wgsl_to_msl(&src)
                                .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                        }
                    }
                }
            }
            for (k_contig, has_c) in [(false, false), (true, false), (false, true), (true, true)] {
                let spec = GemvSpec { dtype, k_contig, batch_dims: 1, has_c };
                let src = spec.render().unwrap_or_default();
                crate::validate::wgsl_to_msl(&src)
                    .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            }
        }
        for (has_bias, has_res, act) in [
            (false, false, MatmulAct::None),
            (true, true, MatmulAct::Relu),
            (true, false, MatmulAct::Clip),
            (false, true, MatmulAct::LeakyRelu),
            (true, true, MatmulAct::Gelu),
            (true, false, MatmulAct::GeluTanh),
        ] {
            let src = splitk_reduce_kernel(has_bias, has_res, act);
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("split-K: {e}\n{src}"));
            let src = gemm_splitk_reduce_kernel(has_bias, has_res, act);
            crate::validate::wgsl_to_msl(&src)
                .unwrap_or_else(|e| panic!("GEMM split-K: {e}\n{src}"));
        }
        let bad = MatmulSpec {
            dtype: DType::I32,
            tune: GemmTune::legacy(128),
            a: Scalar,
            b: Scalar,
            has_c: false,
            vec_out: false,
            batch_dims: 0,
            act: MatmulAct::None,
            has_res: false,
        };
        assert!(bad.render().is_err());
    }
}
