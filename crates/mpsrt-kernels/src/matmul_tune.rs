//! The tiled GEMM's structure knobs ([`GemmTune`]) and the double-buffered K loop they select.
//!
//! A tune names the workgroup's output block (`BM × BN`, each 64 or 128, 256 threads holding
//! `BM/16 × BN/16` outputs each), whether K slabs are double-buffered in workgroup memory
//! (`db`: the next slab is stored into the other stage while this one is multiplied, one
//! barrier per K step instead of two; 2 × (BM + BN) × 8 floats, 16 KiB at 128×128 — inside the
//! ~23 KB that NVIDIA's Vulkan driver allows for two workgroups per SM), and how threads map
//! onto the block (`wl`: each 32-thread warp covers 8 × 4 threads of the 16 × 16 grid instead
//! of 16 × 2, so a warp's `vec4` reads of the B slab touch 8 distinct addresses — 128 bytes,
//! one workgroup-memory wavefront — instead of 16), and the K step (`k16`: 16-deep slabs,
//! half the barriers, twice the loads in flight; 2 × 16 × (BM + BN) floats double-buffered).
//! The legacy kernel is `GemmTune::legacy(64 | 128)`. Text form: `128x64_db1_wl1[_k16]`
//! (parsed by [`GemmTune::parse`]).

use std::fmt::Write;

/// Structure of one tiled GEMM kernel (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmTune {
    /// Output rows per workgroup: 64 or 128.
    pub bm: u32,
    /// Output columns per workgroup: 64 or 128.
    pub bn: u32,
    /// Double-buffered K slabs (one barrier per K step).
    pub db: bool,
    /// 8 × 4 threads per warp (else 16 × 2).
    pub wl: bool,
    /// K step 16 (else 8).
    pub k16: bool,
    /// Stream-K: a fixed grid of workgroups shares the tiles' K steps evenly (`matmul_sk.rs`);
    /// partially covered tiles are summed by a fix-up pass.
    pub sk: bool,
}

impl GemmTune {
    /// The kernel before tunes: square `tile`, one stage, 16 × 2 threads per warp.
    pub const fn legacy(tile: u32) -> Self {
        GemmTune { bm: tile, bn: tile, db: false, wl: false, k16: false, sk: false }
    }

    /// K rows per slab: 8 or 16.
    pub fn k_step(&self) -> u32 {
        if self.k16 {
            16
        } else {
            8
        }
    }

    /// Workgroup memory of the A and B slabs in bytes.
    pub fn shared_bytes(&self) -> u32 {
        (self.bm + self.bn) * self.k_step() * 4 * if self.db { 2 } else { 1 }
    }

    /// Whether the renderer takes this tune.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [("BM", self.bm), ("BN", self.bn)] {
            if v != 64 && v != 128 {
                return Err(format!("GEMM tune {name} must be 64 or 128, got {v}"));
            }
        }
        Ok(())
    }

    /// The text form, `BMxBN_dbD_wlW` (`_k16` with 16-deep slabs, `_sk` stream-K).
    pub fn text(&self) -> String {
        let k = if self.k16 { "_k16" } else { "" };
        let sk = if self.sk { "_sk" } else { "" };
        format!("{}x{}_db{}_wl{}{k}{sk}", self.bm, self.bn, self.db as u8, self.wl as u8)
    }

    /// Parses [`text`](Self::text) (knobs after the block may be omitted: off).
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "GEMM tune {s:?}: expected BMxBN[_db0|1][_wl0|1][_k8|16][_sk], e.g. 128x64_db1_wl1"
            )
        };
        let mut parts = s.trim().split('_');
        let (bm, bn) = parts.next().and_then(|b| b.split_once('x')).ok_or_else(bad)?;
        let mut t = GemmTune {
            bm: bm.parse().map_err(|_| bad())?,
            bn: bn.parse().map_err(|_| bad())?,
            db: false,
            wl: false,
            k16: false,
            sk: false,
        };
        for p in parts {
            match p {
                "sk" => {
                    t.sk = true;
                    continue;
                }
                "k8" => {
                    t.k16 = false;
                    continue;
                }
                "k16" => {
                    t.k16 = true;
                    continue;
                }
                _ => {}
            }
            let (k, v) = p.split_at(p.len().saturating_sub(1));
            let on = match v {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            };
            match k {
                "db" => t.db = on,
                "wl" => t.wl = on,
                _ => return Err(bad()),
            }
        }
        t.check()?;
        Ok(t)
    }

    /// WGSL computing the thread's `(tx, ty)` in the 16 × 16 thread grid from `tid`.
    pub(crate) fn coords(&self) -> &'static str {
        if self.wl {
            // tid bits 0-2 → tx 0-2, bit 5 → tx 3; bits 3-4 → ty 0-1, bits 6-7 → ty 2-3.
            "  let tx = (tid & 7u) | ((tid >> 2u) & 8u); let ty = ((tid >> 3u) & 3u) | ((tid >> 4u) & 12u);\n"
        } else {
            "  let tx = tid % 16u; let ty = tid / 16u;\n"
        }
    }
}

/// The K loop of the tuned kernels over K rows `kb .. ke` (WGSL expressions: `0u`, `K` for a
/// whole tile; a stream-K segment's range), `matmul::k_loop`'s registers (`c{gi}_{i}_{h}`)
/// and fully unrolled products over `ks`-deep slabs (8 or 16). One stage: store, barrier, fetch the next
/// slab into registers, multiply, barrier (the legacy structure). Two stages (`db`): `As`/`Bs`
/// hold two slabs of `ks·qa` / `ks·qb` vec4s; the prologue fetches and stores slab 0, each step
/// then fetches the next slab into registers, multiplies the current stage, stores the fetched
/// slab into the other stage and meets one barrier (a thread reaching the next step's reads has
/// passed it, so every store of that stage is visible; the stage being overwritten was last
/// read before the previous barrier). With two stages `store` indexes with `so_a` / `so_b`,
/// the stage's first vec4, declared here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn k_loop_tuned(
    s: &mut String,
    tune: GemmTune,
    (gm, gn): (usize, usize),
    (qa, qb): (u32, u32),
    (kb, ke): (&str, &str),
    load: &str,
    store: &str,
) {
    let ks = tune.k_step();
    for gi in 0..gm {
        for i in 0..4 {
            for h in 0..gn {
                let _ = writeln!(s, "  var c{gi}_{i}_{h} = vec4<f32>(0.0);");
            }
        }
    }
    let _ = write!(s, "  {{ let k0n = {kb};\n{load}  }}\n");
    if tune.db {
        let _ = write!(s, "  {{ let so_a = 0u; let so_b = 0u;\n{store}  }}\n");
        s.push_str("  workgroupBarrier();\n");
    }
    let _ = writeln!(s, "  for (var k0 = {kb}; k0 < {ke}; k0 = k0 + {ks}u) {{");
    let _ = writeln!(s, "    let more = k0 + {ks}u < {ke};");
    if tune.db {
        // The stage alternates from the range's first step (stage 0: the prologue's).
        let step = if kb == "0u" { "k0".to_string() } else { format!("(k0 - {kb})") };
        let _ = writeln!(s, "    let cur = ({step} / {ks}u) & 1u;");
        let _ = writeln!(s, "    let ra = cur * {}u; let rb = cur * {}u;", ks * qa, ks * qb);
    } else {
        s.push_str(store);
        s.push_str("    workgroupBarrier();\n    let ra = 0u; let rb = 0u;\n");
    }
    let _ = write!(s, "    if (more) {{ let k0n = k0 + {ks}u;\n{load}    }}\n");
    for kk in 0..ks {
        for gi in 0..gm {
            let _ =
                writeln!(s, "    let a{gi}_{kk} = As[ra + {}u + ty];", kk * qa + gi as u32 * 16);
        }
        for h in 0..gn {
            let _ = writeln!(s, "    let b{h}_{kk} = Bs[rb + {}u + tx];", kk * qb + h as u32 * 16);
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
    if tune.db {
        let _ = write!(
            s,
            "    if (more) {{ let so_a = (1u - cur) * {}u; let so_b = (1u - cur) * {}u;\n{store}    }}\n",
            ks * qa,
            ks * qb
        );
    }
    s.push_str("    workgroupBarrier();\n  }\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tune_text_round_trips_and_rejects_bad_forms() {
        for bm in [64, 128] {
            for bn in [64, 128] {
                for db in [false, true] {
                    for wl in [false, true] {
                        for k16 in [false, true] {
                            for sk in [false, true] {
                                let t = GemmTune { bm, bn, db, wl, k16, sk };
                                assert_eq!(GemmTune::parse(&t.text()), Ok(t));
                            }
                        }
                    }
                }
            }
        }
        let t = GemmTune { bm: 64, bn: 128, db: false, wl: false, k16: false, sk: false };
        assert_eq!(GemmTune::parse("64x128"), Ok(t));
        assert_eq!(GemmTune::parse("64x128_k16_db1"), Ok(GemmTune { k16: true, db: true, ..t }));
        assert_eq!(GemmTune::parse("64x128_k16_sk"), Ok(GemmTune { k16: true, sk: true, ..t }));
        assert_eq!(GemmTune::legacy(128).shared_bytes(), 8192);
        assert_eq!(GemmTune::parse("128x64_db1_k16").unwrap().shared_bytes(), 24576);
        for bad in ["", "128", "96x64", "128x64_db2", "128x64_xx1", "128x64_db", "64x64_k32"] {
            assert!(GemmTune::parse(bad).is_err(), "{bad}");
        }
    }

    /// Every tune with every operand load (f32; f16 scalar) and a few epilogues passes naga's
    /// validation and MSL translation (`validate` feature, as the legacy kernels' test).
    #[test]
    fn every_tune_validates_and_translates_to_msl() {
        use crate::matmul::{MatmulAct, MatmulSpec, OperandLoad::*};
        use mpsrt_core::DType;
        for bm in [64, 128] {
            for bn in [64, 128] {
                for (db, wl, k16) in [
                    (true, true, false),
                    (true, false, true),
                    (false, true, true),
                    (false, true, false),
                ] {
                    let tune = GemmTune { bm, bn, db, wl, k16, sk: false };
                    for (dtype, a, b, has_c, has_res, act, vec_out) in [
                        (DType::F32, VecK, VecMN, true, true, MatmulAct::Gelu, true),
                        (DType::F32, VecMN, VecK, false, false, MatmulAct::None, true),
                        (DType::F32, Scalar, Scalar, true, false, MatmulAct::Relu, false),
                        (DType::F16, Scalar, Scalar, false, true, MatmulAct::None, false),
                    ] {
                        let spec = MatmulSpec {
                            dtype,
                            tune,
                            a,
                            b,
                            has_c,
                            vec_out,
                            batch_dims: 1,
                            act,
                            has_res,
                        };
                        let src = spec.render().unwrap();
                        crate::validate::wgsl_to_msl(&src)
                            .unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                    }
                }
            }
        }
    }
}
