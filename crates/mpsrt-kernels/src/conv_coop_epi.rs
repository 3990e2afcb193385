//! The cooperative conv's epilogue (`conv_coop.rs`): bias, residual, activation and the f16
//! NCHW store of every accumulator tile, through a per-subgroup f32 scratch in workgroup memory
//! (its own array, or — `alias` — the slab memory, which is dead once the K loop is done).

use super::CoopConvSpec;
use std::fmt::Write as _;

impl CoopConvSpec {
    /// Bias, residual, activation and the f16 NCHW store of every accumulator tile, through
    /// the subgroup's scratch.
    pub(crate) fn epilogue(&self, w: &mut String) {
        let (s, sg) = (self.size, self.subgroup);
        let _ = writeln!(w, "  let cs = sg * {}u;", s * s);
        if self.splitk > 1 {
            return self.epilogue_partial(w);
        }
        if self.pairs {
            return self.epilogue_pairs(w);
        }
        if self.prefetch {
            return self.epilogue_prefetch(w);
        }
        for i in 0..self.tm {
            for j in 0..self.tn {
                self.tile_to_scratch(w, i, j, "workgroupBarrier();");
                let _ = writeln!(w, "  for (var e = lane; e < {}u; e = e + {sg}u) {{", s * s);
                let _ = writeln!(
                    w,
                    "    let m = m0 + sm + {}u + e / {s}u; let col = n0 + sn + {}u + e % {s}u;",
                    i * s,
                    j * s
                );
                let _ = writeln!(
                    w,
                    "    if (m < OC && col < NCOLS) {{\n      var v = {};",
                    self.cs("cs + e")
                );
                if self.has_bias {
                    w.push_str("      v = v + f32(bias[mw(4u) + m]);\n");
                }
                w.push_str("      let o = (col / P) * (OC * P) + m * P + col % P;\n");
                if self.has_res {
                    w.push_str("      v = v + f32(res[mw(6u) + o]);\n");
                }
                w.push_str("      out[mw(5u) + o] = f16(act(vec4<f32>(v)).x);\n    }\n");
                w.push_str("  }\n  workgroupBarrier();\n");
            }
        }
    }

    /// Accumulator tile `(i, j)` into the subgroup's scratch, then `barrier`.
    fn tile_to_scratch(&self, w: &mut String, i: u32, j: u32, barrier: &str) {
        let (s, sg) = (self.size, self.subgroup);
        if self.emulate {
            let qn = s * s / sg;
            let dst = self.cs(&format!("cs + lane + q * {sg}u"));
            let _ = writeln!(w, "  for (var q = 0u; q < {qn}u; q = q + 1u) {{ {dst} = acc[{}u + q]; }}\n  {barrier}", (i * self.tn + j) * qn);
        } else {
            // Aliased: the scratch is `array<vec2<f32>>`, so pointer and stride count pairs.
            let (at, stride) = if self.alias { ("Sh[cs >> 1u]", s / 2) } else { ("Cs[cs]", s) };
            let _ = writeln!(w, "  coopStoreT(c{i}_{j}, &{at}, {stride}u);\n  {barrier}");
        }
    }

    /// [`Self::epilogue`] with the residual and bias loads of a group of tiles issued before
    /// the group's stores (`prefetch`). Lane `l` handles elements `l + q·subgroup` of each
    /// S×S tile (row-major), as the per-element form does, so each load instruction still
    /// reads runs of consecutive halves of one channel.
    fn epilogue_prefetch(&self, w: &mut String) {
        let (s, sg, tm, tn) = (self.size, self.subgroup, self.tm, self.tn);
        let qn = (s * s).div_ceil(sg);
        let partial = !(s * s).is_multiple_of(sg);
        let loads_per_tile = qn * u32::from(self.has_res);
        let rows_per_group = if tm * tn * loads_per_tile <= 32 { tm } else { 1 };
        let barrier = "workgroupBarrier();";
        // Element (i, j, q)'s channel and column, and whether it is stored.
        let at = |i: u32, j: u32, q: u32| {
            let e = format!("(lane + {}u)", q * sg);
            let ok = if partial { format!("{e} < {}u && ", s * s) } else { String::new() };
            format!(
                "let m = m0 + sm + {}u + {e} / {s}u; let col = n0 + sn + {}u + {e} % {s}u; let ok = {ok}m < OC && col < NCOLS;",
                i * s,
                j * s
            )
        };
        for i0 in (0..tm).step_by(rows_per_group as usize) {
            let rows = i0..i0 + rows_per_group;
            w.push_str("  {\n");
            for i in rows.clone() {
                for q in (0..qn).filter(|_| self.has_bias) {
                    let _ = writeln!(w, "  var b{i}_{q} = 0.0; {{ {} if (ok) {{ b{i}_{q} = f32(bias[mw(4u) + m]); }} }}", at(i, 0, q));
                }
                for j in (0..tn).filter(|_| self.has_res) {
                    for q in 0..qn {
                        let _ = writeln!(w, "  var r{i}_{j}_{q} = 0.0h; {{ {} if (ok) {{ r{i}_{j}_{q} = res[mw(6u) + (col / P) * (OC * P) + m * P + col % P]; }} }}", at(i, j, q));
                    }
                }
            }
            for i in rows {
                for j in 0..tn {
                    self.tile_to_scratch(w, i, j, barrier);
                    for q in 0..qn {
                        let _ = write!(
                            w,
                            "  {{ {} if (ok) {{ var v = {};",
                            at(i, j, q),
                            self.cs(&format!("cs + lane + {}u", q * sg))
                        );
                        if self.has_bias {
                            let _ = write!(w, " v = v + b{i}_{q};");
                        }
                        if self.has_res {
                            let _ = write!(w, " v = v + f32(r{i}_{j}_{q});");
                        }
                        w.push_str(" out[mw(5u) + (col / P) * (OC * P) + m * P + col % P] = f16(act(vec4<f32>(v)).x); } }\n");
                    }
                    let _ = writeln!(w, "  {barrier}");
                }
            }
            w.push_str("  }\n");
        }
    }

    /// [`Self::epilogue`] on pairs of adjacent columns (`pairs`): lane `l` handles pairs
    /// `l + q·subgroup` of each S×S tile (row-major, S/2 pairs a row); the residual pairs of a
    /// tile row are loaded before its first tile is stored.
    fn epilogue_pairs(&self, w: &mut String) {
        let (s, h) = (self.size, self.size / 2);
        // Pair `e` of tile (i, j): its scratch index, channel, first column and output pair.
        let at = |i: u32, j: u32, e: &str, ok: &str| {
            format!(
                "let ci = ({e} / {h}u) * {s}u + ({e} % {h}u) * 2u; let m = m0 + sm + {}u + {e} / {h}u; let col = n0 + sn + {}u + ({e} % {h}u) * 2u; let ok = {ok}m < OC && col < NCOLS; let o = ((col / P) * (OC * P) + m * P + col % P) >> 1u;",
                i * s,
                j * s
            )
        };
        let pair = |idx: &str| {
            if self.alias {
                format!("Sh[({idx}) >> 1u]")
            } else {
                format!("vec2<f32>(Cs[{idx}], Cs[{idx} + 1u])")
            }
        };
        let epi = PairStores {
            size: s,
            subgroup: self.subgroup,
            tm: self.tm,
            tn: self.tn,
            has_bias: self.has_bias,
            has_res: self.has_res,
            at: &at,
            pair: &pair,
            to_scratch: &|w: &mut String, i: u32, j: u32| {
                self.tile_to_scratch(w, i, j, "workgroupBarrier();")
            },
        };
        epi.render(w);
    }

    /// A K slice's raw sums (`splitk > 1`) to slice `wid.z` of the `[S, N, OC, P]` f32 partials.
    fn epilogue_partial(&self, w: &mut String) {
        let (s, sg) = (self.size, self.subgroup);
        w.push_str("  let zo = wid.z * NCOLS * OC;\n");
        for i in 0..self.tm {
            for j in 0..self.tn {
                self.tile_to_scratch(w, i, j, "workgroupBarrier();");
                let _ = writeln!(w, "  for (var e = lane; e < {}u; e = e + {sg}u) {{", s * s);
                let _ = writeln!(
                    w,
                    "    let m = m0 + sm + {}u + e / {s}u; let col = n0 + sn + {}u + e % {s}u;",
                    i * s,
                    j * s
                );
                let _ = writeln!(
                    w,
                    "    if (m < OC && col < NCOLS) {{ out[zo + (col / P) * (OC * P) + m * P + col % P] = {}; }}",
                    self.cs("cs + e")
                );
                w.push_str("  }\n  workgroupBarrier();\n");
            }
        }
    }
}

/// The paired-column store epilogue, shared by the staged kernel (`pairs`) and the direct
/// pointwise kernel (`conv_coop_direct.rs`): per tile row, each lane's residual pairs of the
/// row's tiles are loaded first; then per tile, the accumulator goes through the subgroup's
/// f32 scratch and lane `l` stores pairs `l + q·subgroup` of it (row-major, S/2 pairs a row)
/// with bias, residual and activation as `vec2<f16>`. The kernel supplies its addressing.
pub(crate) struct PairStores<'a> {
    pub size: u32,
    pub subgroup: u32,
    pub tm: u32,
    pub tn: u32,
    pub has_bias: bool,
    pub has_res: bool,
    /// `(i, j, e, ok)` → declarations of `ci` (scratch index), `m` (channel), `ok` (stored:
    /// `ok` prefixed to the kernel's bounds) and `o` (output pair index) for pair `e` of tile
    /// `(i, j)`.
    pub at: &'a dyn Fn(u32, u32, &str, &str) -> String,
    /// The f32 pair at scratch index `idx`.
    pub pair: &'a dyn Fn(&str) -> String,
    /// Accumulator tile `(i, j)` into the subgroup's scratch, then a barrier.
    pub to_scratch: &'a dyn Fn(&mut String, u32, u32),
}

impl PairStores<'_> {
    pub(crate) fn render(&self, w: &mut String) {
        let (s, sg) = (self.size, self.subgroup);
        let h = s / 2;
        let qn = (s * h).div_ceil(sg);
        let partial = !(s * h).is_multiple_of(sg);
        let at = |i: u32, j: u32, q: u32| {
            let e = format!("(lane + {}u)", q * sg);
            let ok = if partial { format!("{e} < {}u && ", s * h) } else { String::new() };
            (self.at)(i, j, &e, &ok)
        };
        for i in 0..self.tm {
            w.push_str("  {\n");
            for j in (0..self.tn).filter(|_| self.has_res) {
                for q in 0..qn {
                    let _ = writeln!(w, "  var r{j}_{q} = vec2<f16>(); {{ {} if (ok) {{ r{j}_{q} = res[(mw(6u) >> 1u) + o]; }} }}", at(i, j, q));
                }
            }
            for j in 0..self.tn {
                (self.to_scratch)(w, i, j);
                for q in 0..qn {
                    let _ = write!(
                        w,
                        "  {{ {} if (ok) {{ var v = {};",
                        at(i, j, q),
                        (self.pair)("cs + ci")
                    );
                    if self.has_bias {
                        w.push_str(" v = v + f32(bias[mw(4u) + m]);");
                    }
                    if self.has_res {
                        let _ = write!(w, " v = v + vec2<f32>(r{j}_{q});");
                    }
                    w.push_str(" out[(mw(5u) >> 1u) + o] = vec2<f16>(act(vec4<f32>(v, 0.0, 0.0)).xy); } }\n");
                }
                w.push_str("  workgroupBarrier();\n");
            }
            w.push_str("  }\n");
        }
    }
}
