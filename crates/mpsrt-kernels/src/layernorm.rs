//! Layer normalization over the last axis in one kernel (issue 23): one workgroup per row
//! (256 threads, rows beyond 65535 on a 2-D grid), f32 arithmetic (f32 rows, or f16 rows of a
//! multiple of 4 packed two halves per word: `LayerNormSpec::f16`). Each thread strides over
//! the row (vec4 loads when the row length is a multiple of 4); the mean and then the variance
//! of the deviations (two passes over the row, which stays in cache, for the precision of a
//! centered variance) are tree-reduced in workgroup memory; the third pass normalizes and
//! applies scale and bias while storing.
//!
//! Short rows (`seg` > 0, vec4 rows of at most `seg · nv` vec4s: BERT's 768) take a second
//! form: [`LAYERNORM_SEG_WG`] threads hold `LAYERNORM_SEG_WG / seg` rows, `seg` threads per row,
//! each keeping its `nv` vec4s in registers, so the row is read from memory once and the two
//! reductions run over `seg` threads (`log2(seg)` barrier steps) instead of 256 — the
//! one-row-per-256-threads form left 64 of BERT's threads idle, read each row three times and
//! paid 16 barriers per row. Opt-in (`MPSRT_LAYERNORM_SEG=1`): not faster on the H100.
//!
//! With `residual`, the row is `x + r` (SkipLayerNormalization: a transformer's residual add
//! before its norm) and, with `sum_out`, that sum is stored too for a later consumer. Bindings
//! in order: `x`, \[`r`\], `gamma`, \[`beta`\], `y`, \[`s`\], then the metadata uniform
//! (`rows`, `n` in vec4 units or elements, `eps` bits, the element count of a row; then the
//! offsets of `x`, `r`, `gamma`, `beta` in the same units).

use std::fmt::Write;

/// Threads per workgroup (one row each workgroup).
pub const LAYERNORM_WG: u32 = 256;
/// Threads per workgroup of the segmented form (`seg` threads per row).
pub const LAYERNORM_SEG_WG: u32 = 128;
/// Most vec4s a thread of the segmented form holds.
pub const LAYERNORM_SEG_MAX_NV: u32 = 8;

/// One specialization of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerNormSpec {
    /// Rows are read as `vec4<f32>` (row length a multiple of 4).
    pub vec4: bool,
    pub residual: bool,
    pub sum_out: bool,
    pub bias: bool,
    /// Every operand and result is f16 (with `vec4`: 4 halves per `vec2<u32>`, unpacked to f32
    /// on load, statistics and arithmetic in f32, packed on store — no shader-f16 needed), so a
    /// `precision=f16` graph runs its norms without casts around them.
    pub f16: bool,
    /// Threads per row of the segmented form (16, 32 or 64; needs `vec4`), 0 for the
    /// one-row-per-workgroup form.
    pub seg: u32,
    /// vec4s each thread of the segmented form holds (1..=[`LAYERNORM_SEG_MAX_NV`]).
    pub nv: u32,
    /// With `seg`: the flat form — one row per workgroup of `seg` threads (32–256), each
    /// thread's vec4s in registers, and each reduction one barrier: every thread writes its
    /// partial, then reads the row's `seg` partials itself (no `log2(seg)`-step tree).
    pub flat: bool,
}

impl LayerNormSpec {
    /// `(seg, nv)` of the segmented form for rows of `n4` vec4s, or `None` (rows too long).
    pub fn plan_seg(n4: u32) -> Option<(u32, u32)> {
        [16u32, 32, 64]
            .into_iter()
            .map(|seg| (seg, n4.div_ceil(seg)))
            .find(|&(_, nv)| (1..=LAYERNORM_SEG_MAX_NV).contains(&nv) && n4 > 0)
    }

    /// `(seg, nv)` of the flat form for rows of `n4` vec4s (≤ 4 vec4s per thread: BERT's 768
    /// floats take 64 threads of 3), or `None`.
    pub fn plan_flat(n4: u32) -> Option<(u32, u32)> {
        [32u32, 64, 128, 256]
            .into_iter()
            .map(|seg| (seg, n4.div_ceil(seg)))
            .find(|&(_, nv)| (1..=4).contains(&nv) && n4 > 0)
    }

    /// Rows per workgroup: 1, or `LAYERNORM_SEG_WG / seg` in the segmented form.
    pub fn rows_per_workgroup(&self) -> u32 {
        if self.flat {
            return 1;
        }
        LAYERNORM_SEG_WG.checked_div(self.seg).unwrap_or(1)
    }

    /// The WGSL text.
    pub fn render(&self) -> String {
        let ty = if self.vec4 { "vec4<f32>" } else { "f32" };
        // Storage element type: f16 rows as two packed words per 4 halves (vec4 only).
        let h = self.f16 && self.vec4;
        let st = if h { "vec2<u32>" } else { ty };
        let mut w = String::new();
        let _ = writeln!(
            w,
            "// Layer norm, one row per workgroup of {LAYERNORM_WG}: strided {ty} loads, \
             workgroup-memory tree reductions (mean, then centered variance), affine store."
        );
        let mut names = vec!["x"];
        if self.residual {
            names.push("r");
        }
        names.push("gamma");
        if self.bias {
            names.push("beta");
        }
        let mut b = 0;
        for n in &names {
            let _ = writeln!(w, "@group(0) @binding({b}) var<storage, read> {n}: array<{st}>;");
            b += 1;
        }
        let mut outs = vec!["y"];
        if self.sum_out {
            outs.push("s");
        }
        for n in &outs {
            let _ =
                writeln!(w, "@group(0) @binding({b}) var<storage, read_write> {n}: array<{st}>;");
            b += 1;
        }
        let _ = writeln!(w, "struct Meta {{ w: array<vec4<u32>, 2> }};");
        let _ = writeln!(w, "@group(0) @binding({b}) var<uniform> prm: Meta;");
        let _ = writeln!(w, "var<workgroup> red: array<f32, {LAYERNORM_WG}>;");
        // `u(..)` reads a stored element as f32, `p(..)` packs a result for storing.
        if h {
            w.push_str("fn u(v: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)); }\n");
            w.push_str("fn p(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }\n");
        } else {
            let _ = writeln!(w, "fn u(v: {ty}) -> {ty} {{ return v; }}");
            let _ = writeln!(w, "fn p(v: {ty}) -> {ty} {{ return v; }}");
        }
        let load = if self.residual {
            "u(x[i + prm.w[1].x]) + u(r[i + prm.w[1].y])"
        } else {
            "u(x[i + prm.w[1].x])"
        };
        let _ = writeln!(w, "fn load(i: u32) -> {ty} {{ return {load}; }}");
        let total = if self.vec4 { "dot(v, vec4<f32>(1.0))" } else { "v" };
        let _ = writeln!(w, "fn total(v: {ty}) -> f32 {{ return {total}; }}");
        if self.seg > 0 && self.vec4 && self.flat {
            self.render_flat(&mut w);
            return w;
        }
        if self.seg > 0 && self.vec4 {
            self.render_seg(&mut w);
            return w;
        }
        w.push_str(&format!(
            "fn reduce_sum(v: f32, lid: u32) -> f32 {{
    red[lid] = v;
    workgroupBarrier();
    for (var s = {half}u; s > 0u; s = s >> 1u) {{
        if (lid < s) {{ red[lid] = red[lid] + red[lid + s]; }}
        workgroupBarrier();
    }}
    let t = red[0];
    workgroupBarrier();
    return t;
}}
@compute @workgroup_size({LAYERNORM_WG})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let row = wg.x + wg.y * nw.x;
    let rows = prm.w[0].x;
    let n = prm.w[0].y;
    let eps = bitcast<f32>(prm.w[0].z);
    let count = f32(prm.w[0].w);
    if (row >= rows) {{ return; }}
    let base = row * n;
    var acc = 0.0;
    for (var i = lid; i < n; i = i + {LAYERNORM_WG}u) {{ acc = acc + total(load(base + i)); }}
    let mean = reduce_sum(acc, lid) / count;
    var acc2 = 0.0;
    for (var i = lid; i < n; i = i + {LAYERNORM_WG}u) {{
        let d = load(base + i) - {ty}(mean);
        acc2 = acc2 + total(d * d);
    }}
    let inv = inverseSqrt(reduce_sum(acc2, lid) / count + eps);
    for (var i = lid; i < n; i = i + {LAYERNORM_WG}u) {{
        let v = load(base + i);
{store_sum}        y[base + i] = p((v - {ty}(mean)) * inv * u(gamma[i + prm.w[1].z]){add_beta});
    }}
}}
",
            half = LAYERNORM_WG / 2,
            store_sum = if self.sum_out { "        s[base + i] = p(v);\n" } else { "" },
            add_beta = if self.bias { " + u(beta[i + prm.w[1].w])" } else { "" },
        ));
        w
    }
}

impl LayerNormSpec {
    /// The flat form's entry point (see [`LayerNormSpec::flat`]); bindings, metadata and the
    /// `load`/`u`/`p` helpers are shared. The row check returns before the barriers, which is
    /// uniform: the whole workgroup is one row.
    fn render_flat(&self, w: &mut String) {
        let (seg, nv) = (self.seg, self.nv.max(1));
        let _ = writeln!(
            w,
            "var<workgroup> p1: array<f32, {seg}>;\nvar<workgroup> p2: array<f32, {seg}>;"
        );
        let _ = write!(
            w,
            "@compute @workgroup_size({seg})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {{
    let row = wg.x + wg.y * nw.x;
    let n = prm.w[0].y;
    let eps = bitcast<f32>(prm.w[0].z);
    let count = f32(prm.w[0].w);
    if (row >= prm.w[0].x) {{ return; }}
    let base = row * n;
"
        );
        for j in 0..nv {
            let _ = writeln!(
                w,
                "    let i{j} = t + {}u;\n    var x{j} = vec4<f32>(0.0);\n    if (i{j} < n) {{ x{j} = load(base + i{j}); }}",
                j * seg
            );
        }
        let tot: Vec<String> = (0..nv).map(|j| format!("total(x{j})")).collect();
        let _ = writeln!(
            w,
            "    p1[t] = {};\n    workgroupBarrier();\n    var a1 = 0.0;\n    for (var j = 0u; j < {seg}u; j = j + 1u) {{ a1 = a1 + p1[j]; }}\n    let mean = a1 / count;",
            tot.join(" + ")
        );
        for j in 0..nv {
            let _ = writeln!(
                w,
                "    let d{j} = select(vec4<f32>(0.0), x{j} - vec4<f32>(mean), i{j} < n);"
            );
        }
        let sq: Vec<String> = (0..nv).map(|j| format!("total(d{j} * d{j})")).collect();
        let _ = writeln!(
            w,
            "    p2[t] = {};\n    workgroupBarrier();\n    var a2 = 0.0;\n    for (var j = 0u; j < {seg}u; j = j + 1u) {{ a2 = a2 + p2[j]; }}\n    let inv = inverseSqrt(a2 / count + eps);",
            sq.join(" + ")
        );
        let beta = if self.bias { " + u(beta[i + prm.w[1].w])" } else { "" };
        for j in 0..nv {
            let _ = writeln!(w, "    if (i{j} < n) {{\n        let i = i{j};");
            if self.sum_out {
                let _ = writeln!(w, "        s[base + i] = p(x{j});");
            }
            let _ = writeln!(
                w,
                "        y[base + i] = p(d{j} * inv * u(gamma[i + prm.w[1].z]){beta});\n    }}"
            );
        }
        w.push_str("}\n");
    }

    /// The segmented form's reduction and entry point (see the module documentation); the
    /// bindings, metadata and `load`/`u`/`p` helpers are shared with the other form. Threads of
    /// rows past the end keep to the barriers and store nothing.
    fn render_seg(&self, w: &mut String) {
        let (seg, nv, wg) = (self.seg, self.nv, LAYERNORM_SEG_WG);
        let _ = writeln!(w, "var<workgroup> sred: array<f32, {wg}>;");
        let _ = write!(
            w,
            "fn seg_sum(v: f32, lid: u32) -> f32 {{
    sred[lid] = v;
    workgroupBarrier();
    let t = lid % {seg}u;
    for (var s = {half}u; s > 0u; s = s >> 1u) {{
        if (t < s) {{ sred[lid] = sred[lid] + sred[lid + s]; }}
        workgroupBarrier();
    }}
    let r = sred[lid - t];
    workgroupBarrier();
    return r;
}}
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let row = (wg.x + wg.y * nw.x) * {rpw}u + lid / {seg}u;
    let t = lid % {seg}u;
    let rows = prm.w[0].x;
    let n = prm.w[0].y;
    let eps = bitcast<f32>(prm.w[0].z);
    let count = f32(prm.w[0].w);
    let ok = row < rows;
    let base = row * n;
    var v: array<vec4<f32>, {nv}>;
    var acc = 0.0;
    for (var j = 0u; j < {nv}u; j = j + 1u) {{
        let i = t + j * {seg}u;
        var x = vec4<f32>(0.0);
        if (ok && i < n) {{ x = load(base + i); }}
        v[j] = x;
        acc = acc + total(x);
    }}
    let mean = seg_sum(acc, lid) / count;
    var acc2 = 0.0;
    for (var j = 0u; j < {nv}u; j = j + 1u) {{
        let i = t + j * {seg}u;
        if (i < n) {{ let d = v[j] - vec4<f32>(mean); acc2 = acc2 + total(d * d); }}
    }}
    let inv = inverseSqrt(seg_sum(acc2, lid) / count + eps);
    if (!ok) {{ return; }}
    for (var j = 0u; j < {nv}u; j = j + 1u) {{
        let i = t + j * {seg}u;
        if (i < n) {{
{store_sum}            y[base + i] = p((v[j] - vec4<f32>(mean)) * inv * u(gamma[i + prm.w[1].z]){add_beta});
        }}
    }}
}}
",
            half = seg / 2,
            rpw = wg / seg,
            store_sum = if self.sum_out { "            s[base + i] = p(v[j]);\n" } else { "" },
            add_beta = if self.bias { " + u(beta[i + prm.w[1].w])" } else { "" },
        );
    }
}

#[cfg(all(test, feature = "validate"))]
mod tests {
    use super::*;

    #[test]
    fn every_variant_validates_and_translates_to_msl() {
        for bits in 0..32u32 {
            let spec = LayerNormSpec {
                vec4: bits & 1 != 0,
                residual: bits & 2 != 0,
                sum_out: bits & 4 != 0 && bits & 2 != 0,
                bias: bits & 8 != 0,
                f16: bits & 16 != 0 && bits & 1 != 0,
                seg: 0,
                nv: 0,
                flat: false,
            };
            let src = spec.render();
            crate::validate::wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            if spec.vec4 {
                for (seg, nv) in [(32, 6), (16, 1), (64, 8)] {
                    let spec = LayerNormSpec { seg, nv, ..spec };
                    let src = spec.render();
                    crate::validate::wgsl_to_msl(&src)
                        .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                }
                for (seg, nv) in [(64, 3), (32, 1), (256, 4)] {
                    let spec = LayerNormSpec { seg, nv, flat: true, ..spec };
                    let src = spec.render();
                    crate::validate::wgsl_to_msl(&src)
                        .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                }
            }
        }
    }
}
