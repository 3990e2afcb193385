//! A pointwise stride-1 f16 conv on cooperative matrices with both operands loaded straight
//! from global memory (`conv_coop.rs`'s staged kernel goes through workgroup-memory slabs).
//!
//! For a 1×1 stride-1 NCHW conv, image `b`'s input is the row-major `[C, P]` matrix at
//! `x + b·C·P` and the weights the row-major `[OC, C]` matrix, so `out[b] = W · X[b]`: a 16×16
//! B fragment of 16 consecutive output columns is one strided matrix load (row stride `P`) as
//! long as the 16 columns stay inside one image — `P % 16 == 0` (ResNet-50's 56×56 and 28×28
//! maps). No slab, no barrier in the K loop: each subgroup streams its own fragments (the A
//! rows it shares with its neighbours come from the cache), so the small-K convs that the
//! staged kernel runs latency-bound (two barriers and a store per 32 K rows, two workgroups
//! per SM) keep many independent subgroups in flight. Workgroup memory holds only the
//! epilogue's per-subgroup f32 scratch (1 KiB each).
//!
//! Work split: a workgroup of `sgs` subgroups owns `tm·16` output channels × `sgs·tn·16`
//! columns (its subgroups side by side along the columns); a subgroup holds `tm × tn`
//! accumulators; the K loop loads `ku` K steps of fragments before their products. The
//! epilogue is the staged kernel's paired store (`conv_coop_epi.rs`): bias, f16 residual,
//! activation, `vec2<f16>` NCHW stores. Metadata as the staged kernel's (`conv_gemm_meta`).
//!
//! `emulate` (testing, CI on lavapipe): the same addressing with the fragments' products
//! summed per element in f32 registers from the same global addresses.

use super::epi::PairStores;
use super::ConvShape;
use crate::matmul::MatmulAct;
use std::fmt::Write as _;

/// Tile size of the direct kernel (16×16×16 f16 → f32; NVIDIA's configuration).
const S: u32 = 16;

/// A rendered direct pointwise conv kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopDirectSpec {
    pub shape: ConvShape,
    /// Lanes per subgroup.
    pub subgroup: u32,
    /// Subgroups per workgroup (side by side along the output columns): 1, 2 or 4.
    pub sgs: u32,
    /// Accumulator tiles per subgroup along the channels and along the columns: 1, 2 or 4.
    pub tm: u32,
    pub tn: u32,
    /// K steps of 16 whose fragment loads are issued before their products: 1, 2 or 4
    /// (dividing `K / 16`).
    pub ku: u32,
    pub has_bias: bool,
    pub bias_f16: bool,
    pub has_res: bool,
    pub act: MatmulAct,
    /// Testing: products in f32 registers (no cooperative matrices or subgroup builtins).
    pub emulate: bool,
}

impl CoopDirectSpec {
    /// Whether a conv of `shape` fits the direct kernel: pointwise, stride 1, `P`, `C` and
    /// `OC` multiples of 16 (whole fragments, none straddling two images).
    pub fn fits(shape: &ConvShape) -> bool {
        shape.pointwise()
            && shape.sh == 1
            && shape.sw == 1
            && shape.p().is_multiple_of(S)
            && shape.c.is_multiple_of(S)
            && shape.oc.is_multiple_of(S)
            && shape.c > 0
            && shape.p() > 0
    }
    /// Output channels per workgroup.
    pub fn block_m(&self) -> u32 {
        self.tm * S
    }
    /// Output columns per workgroup.
    pub fn block_n(&self) -> u32 {
        self.sgs * self.tn * S
    }
    pub fn threads(&self) -> u32 {
        self.sgs * self.subgroup
    }
    /// Workgroup memory: one f32 16×16 scratch per subgroup.
    pub fn shared_bytes(&self) -> u32 {
        self.sgs * S * S * 4
    }
    /// Workgroups for `n` images: `[column blocks, channel blocks, 1]`.
    pub fn grid(&self, n: u32) -> [u32; 3] {
        [(n * self.shape.p()).div_ceil(self.block_n()), self.shape.oc.div_ceil(self.block_m()), 1]
    }

    fn check(&self) -> Result<(), String> {
        if !Self::fits(&self.shape) {
            return Err(format!(
                "conv_coop_direct: needs a pointwise stride-1 conv with P, C, OC multiples of 16, got {:?}",
                self.shape
            ));
        }
        if !matches!(self.sgs, 1 | 2 | 4) || !matches!(self.tm, 1 | 2 | 4) {
            return Err(format!("conv_coop_direct: sgs and tm must be 1, 2 or 4, got {self:?}"));
        }
        if !matches!(self.tn, 1 | 2 | 4) || !matches!(self.ku, 1 | 2 | 4) {
            return Err(format!("conv_coop_direct: tn and ku must be 1, 2 or 4, got {self:?}"));
        }
        if !(self.shape.c / S).is_multiple_of(self.ku) {
            return Err(format!("conv_coop_direct: ku {} must divide K / 16", self.ku));
        }
        let sg = self.subgroup;
        if !sg.is_power_of_two() || !(8..=128).contains(&sg) {
            return Err(format!("conv_coop_direct: unsupported subgroup size {sg}"));
        }
        Ok(())
    }

    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// The `ku` steps of K starting at `k0` of the largest `ku` (4, 2, 1) dividing `K / 16`
    /// and at most `want`.
    pub fn k_unroll(shape: &ConvShape, want: u32) -> u32 {
        [4, 2, 1]
            .into_iter()
            .find(|&u| u <= want.max(1) && (shape.c / S).is_multiple_of(u))
            .unwrap_or(1)
    }

    /// Render the WGSL source.
    pub fn render(&self) -> Result<String, String> {
        self.check()?;
        let sh = self.shape;
        let (tm, tn, ku, sg) = (self.tm, self.tn, self.ku, self.subgroup);
        let mut w = String::with_capacity(16384);
        let _ = writeln!(w, "// generated by mpsrt-kernels: conv_coop_direct {self:?}");
        w.push_str(if self.emulate {
            "enable f16;\n"
        } else {
            "enable f16;\nenable wgpu_cooperative_matrix;\n"
        });
        let _ = writeln!(
            w,
            "const K: u32 = {}u; const P: u32 = {}u; const OC: u32 = {}u;",
            sh.c,
            sh.p(),
            sh.oc
        );
        w.push_str("struct Meta { w: array<vec4<u32>, 4> };\n");
        let mut bufs = vec![("x", "f16", "read"), ("wt", "f16", "read")];
        if self.has_bias {
            bufs.push(("bias", if self.bias_f16 { "f16" } else { "f32" }, "read"));
        }
        if self.has_res {
            bufs.push(("res", "vec2<f16>", "read"));
        }
        bufs.push(("out", "vec2<f16>", "read_write"));
        for (i, (name, ty, access)) in bufs.iter().enumerate() {
            let _ =
                writeln!(w, "@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;");
        }
        let _ = writeln!(w, "@group(0) @binding({}) var<uniform> M: Meta;", bufs.len());
        w.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
        w.push_str(self.act.wgsl());
        let _ = writeln!(w, "var<workgroup> Cs: array<f32, {}>;", self.sgs * S * S);
        let _ = writeln!(w, "@compute @workgroup_size({})", self.threads());
        w.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32");
        if self.emulate {
            let _ = writeln!(w, ") {{\n  let sg = tid / {sg}u; let lane = tid % {sg}u;");
        } else {
            w.push_str(",\n        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n");
        }
        w.push_str("  let NCOLS = mw(0u); let xoff = mw(1u); let woff = mw(2u);\n");
        let _ = writeln!(
            w,
            "  let m0 = wid.y * {}u; let n0 = wid.x * {}u + sg * {}u;",
            self.block_m(),
            self.block_n(),
            tn * S
        );
        // Each fragment's base: a row tile past OC / a column tile past N·P reads tile 0
        // (uniform per subgroup, so the loads stay unconditional) and stores nothing.
        for i in 0..tm {
            let _ = writeln!(
                w,
                "  let mr{i} = m0 + {}u; let ab{i} = woff + select(0u, mr{i}, mr{i} < OC) * K;",
                i * S
            );
        }
        for j in 0..tn {
            let _ = writeln!(
                w,
                "  let nc{j} = n0 + {}u; let cc{j} = select(0u, nc{j}, nc{j} < NCOLS); let img{j} = cc{j} / P; let pp{j} = cc{j} % P; let bb{j} = xoff + img{j} * K * P + pp{j};",
                j * S
            );
        }
        if self.emulate {
            let qn = S * S / sg;
            let _ = writeln!(w, "  var acc = array<f32, {}>();", tm * tn * qn);
            w.push_str("  let rt = min(mw(0u), 1u);\n");
        } else {
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(w, "  var c{i}_{j} = coop_mat16x16<f32, C>();");
                }
            }
        }
        let _ = writeln!(w, "  for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", ku * S);
        if self.emulate {
            let qn = S * S / sg;
            let _ = writeln!(w, "    for (var ij = 0u; ij < {}u * rt; ij = ij + 1u) {{ let ti = ij / {tn}u; let tj = ij % {tn}u;", tm * tn);
            // Each tile's bases through a switch-free chain of selects.
            let pick = |v: &str, idx: &str, n: u32| {
                (1..n).fold(format!("{v}0"), |a, t| format!("select({a}, {v}{t}, {idx} == {t}u)"))
            };
            let _ = writeln!(
                w,
                "      let ab = {}; let bb = {};",
                pick("ab", "ti", tm),
                pick("bb", "tj", tn)
            );
            let _ = writeln!(w, "      for (var q = 0u; q < {}u * rt; q = q + 1u) {{ let e = lane + q * {sg}u; let r = e / 16u; let c = e % 16u; var sum = acc[ij * {}u + q];", qn, qn);
            let _ = writeln!(w, "        for (var t = 0u; t < {}u * rt; t = t + 1u) {{ let k = k0 + t; sum = sum + f32(wt[ab + r * K + k]) * f32(x[bb + k * P + c]); }}", ku * S);
            let _ = writeln!(w, "        acc[ij * {qn}u + q] = sum; }} }}");
        } else {
            for u in 0..ku {
                for i in 0..tm {
                    let _ = writeln!(w, "    let a{i}_{u} = coopLoadT<coop_mat16x16<f16, A>>(&wt[ab{i} + k0 + {}u], K);", u * S);
                }
                for j in 0..tn {
                    let _ = writeln!(w, "    let b{j}_{u} = coopLoadT<coop_mat16x16<f16, B>>(&x[bb{j} + (k0 + {}u) * P], P);", u * S);
                }
            }
            for u in 0..ku {
                for i in 0..tm {
                    for j in 0..tn {
                        let _ = writeln!(
                            w,
                            "    c{i}_{j} = coopMultiplyAdd(a{i}_{u}, b{j}_{u}, c{i}_{j});"
                        );
                    }
                }
            }
        }
        w.push_str("  }\n");
        self.epilogue(&mut w);
        w.push_str("}\n");
        Ok(w)
    }

    /// Every tile through the subgroup's scratch: the staged kernel's paired stores
    /// (`conv_coop_epi.rs`, [`PairStores`]) with this kernel's per-tile image and pixel.
    fn epilogue(&self, w: &mut String) {
        let (tn, sg) = (self.tn, self.subgroup);
        let _ = writeln!(w, "  let cs = sg * {}u;", S * S);
        let h = S / 2;
        let at = |i: u32, j: u32, e: &str, ok: &str| {
            format!(
                "let ci = ({e} / {h}u) * 16u + ({e} % {h}u) * 2u; let m = mr{i} + {e} / {h}u; let ok = {ok}m < OC && nc{j} < NCOLS; let o = (img{j} * OC * P + m * P + pp{j} + ({e} % {h}u) * 2u) >> 1u;"
            )
        };
        let to_scratch = |w: &mut String, i: u32, j: u32| {
            if self.emulate {
                let qe = S * S / sg;
                let _ = writeln!(w, "  for (var q = 0u; q < {qe}u; q = q + 1u) {{ Cs[cs + lane + q * {sg}u] = acc[{}u + q]; }}", (i * tn + j) * qe);
            } else {
                let _ = writeln!(w, "  coopStoreT(c{i}_{j}, &Cs[cs], 16u);");
            }
            w.push_str("  workgroupBarrier();\n");
        };
        PairStores {
            size: S,
            subgroup: sg,
            tm: self.tm,
            tn,
            has_bias: self.has_bias,
            has_res: self.has_res,
            at: &at,
            pair: &|idx: &str| format!("vec2<f32>(Cs[{idx}], Cs[{idx} + 1u])"),
            to_scratch: &to_scratch,
        }
        .render(w);
    }
}
