//! The lists of generation-3 tunes `bench_coop_sweep` times (`COOP_VARIANTS=...`,
//! `COOP_AB=...`): one list per session's question, kept so a later session can rerun an
//! earlier comparison by name. Split from `matmul_coop_tune.rs`, which holds the knobs.

use super::CoopTune;

impl CoopTune {
    /// Tunes `bench_coop_sweep` times with `COOP_VARIANTS=experimental` (and
    /// `MPSRT_COOP_EXPERIMENTAL=1`): the unverified interior (`fi1`) and direct-load (`dg1`)
    /// paths, which the launcher uses only where every block is whole (the `aligned`
    /// specialization, no branch around the matrix operations).
    pub fn experimental() -> Vec<CoopTune> {
        let d = CoopTune::default();
        let mut v = Vec::new();
        for (wm, wn, tm, tn) in [(2, 2, 4, 4), (2, 4, 4, 2), (4, 2, 2, 4), (2, 2, 2, 2)] {
            v.push(CoopTune { wm, wn, tm, tn, fi: true, ..d });
        }
        for (wm, wn, tm, tn, bk, db) in [
            (2, 2, 4, 4, 32, false),
            (2, 2, 4, 4, 16, true),
            (1, 1, 4, 4, 32, false),
            (4, 2, 2, 4, 16, true),
        ] {
            v.push(CoopTune { wm, wn, tm, tn, bk, db, dg: true, ..d });
        }
        v
    }

    /// The kernel structures `COOP_VARIANTS=structures` times (with `MPSRT_COOP_EXPERIMENTAL=1`):
    /// the knobs modelled on what runs fast on NVIDIA's cooperative-matrix implementation
    /// (`vk_cooperative_matrix_perf`, llama.cpp's `mul_mm.comp`) — unchecked modules (`uc`),
    /// vector-typed slabs (`vs`), one slab with register prefetch (`rp`), 8-subgroup
    /// 128×256 / 256×128 / 128×128 workgroups, K 16 — one factor at a time from the default,
    /// then combined; and the aligned interior paths (`fi`, `dg`) under `uc`.
    pub fn structures() -> Vec<CoopTune> {
        // Most promising first (a sweep may run out of its time budget). H200 call 2 timed
        // the first structures (vs/rp/uc/sw, 8-subgroup blocks): `fi1_vs4_uc1` (aligned)
        // led at 186 TFLOP/s; these are its neighbours and `cl1`, its any-shape form.
        [
            "fi1_vs4_uc1",
            "cl1_vs4_uc1",
            "db1_fi1_vs4_uc1",
            "w2x4_t4x4_k32_cl1_vs4_uc1",
            "k64_cl1_vs4_uc1",
            "w4x2_t4x4_k32_cl1_vs4_uc1",
            "w2x4_t4x2_k32_cl1_vs4_uc1",
            "k16_cl1_vs4_uc1",
            "db1_cl1_vs4_uc1",
            "cl1_vs4_uc1_sw8",
            "p16_cl1_vs4_uc1",
            "w2x2_t2x4_k32_cl1_vs4_uc1",
            "w2x4_t2x2_k32_cl1_vs4_uc1",
            "w2x2_t2x2_k32_cl1_vs4_uc1",
            "w2x4_t4x4_k32_fi1_vs4_uc1",
            "k64_fi1_vs4_uc1",
            "rp1_cl1_vs4_uc1",
            "w4x2_t2x4_k32_cl1_vs4_uc1",
            "k16_db1_cl1_vs4_uc1",
            "w2x4_t4x4_k16_rp1_cl1_vs4_uc1",
            "w2x4_t4x4_k32_cl1_vs4_uc1_sw8",
            "cl1_uc1",
            // 4×8 / 8×4 tiles per subgroup (128×256 on 2×2 subgroups, 128×128 on 2 or 1×2).
            "w2x2_t4x8_k32_fi1_cl1_vs4_uc1",
            "w2x1_t4x8_k32_fi1_cl1_vs4_uc1",
            "w1x2_t8x4_k32_fi1_cl1_vs4_uc1",
        ]
        .iter()
        .map(|t| CoopTune::parse(t).expect("structure tune"))
        .collect()
    }

    /// The pipelined candidates `COOP_VARIANTS=pipelined` times (issue 23, 8th session): the
    /// default with 16-byte global loads (`gl1`), two
    /// slabs with one barrier per step (`db1`) on the unguarded whole-block loop, with fewer
    /// staging registers per thread — split prefetch (`sp1`), K 16, or 8 subgroups sharing
    /// the block (4×2 / 2×4 tiles each: half the accumulators) — and 8-subgroup 128×256 /
    /// 256×128 blocks (a quarter less L2 traffic per flop than 128×128).
    pub fn pipelined() -> Vec<CoopTune> {
        [
            "fi1_cl1_vs4_uc1_gl1",
            "sp1_db1_fi1_cl1_vs4_uc1",
            "k16_db1_fi1_cl1_vs4_uc1",
            "w2x4_t4x2_k32_db1_fi1_cl1_vs4_uc1",
            "w2x4_t4x4_k16_db1_fi1_cl1_vs4_uc1",
            "w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1",
            "w4x2_t2x4_k32_db1_fi1_cl1_vs4_uc1",
            "w2x4_t4x2_k32_db1_sp1_fi1_cl1_vs4_uc1",
            "w2x4_t4x2_k32_fi1_cl1_vs4_uc1",
            "w2x4_t4x4_k16_db1_fi1_cl1_vs4_uc1_sw8",
            "sp1_db1_fi1_cl1_vs4_uc1_gl1",
            "fi1_cl1_vs4_uc1_fo1",
            "sp1_db1_fi1_cl1_vs4_uc1_fo1",
            "k64_fi1_cl1_vs4_uc1_fo1",
            "k16_db1_fi1_cl1_vs4_uc1_ns1",
            "fi1_cl1_vs4_uc1_ns1",
            "k16_db1_fi1_cl1_vs4_uc1_ns1_rq1",
        ]
        .iter()
        .map(|t| CoopTune::parse(t).expect("pipelined tune"))
        .collect()
    }

    /// The candidates `COOP_AB=prefetch` times in one process (issue 23, 9th session): the
    /// occupancy probe (`xs`: the default with 2, 10 and 24 KiB more workgroup memory — where
    /// do two workgroups per SM stop?), one slab with the next slab's 16-byte loads in
    /// registers during the products (`rp1`, so a workgroup hides its own global latency
    /// instead of relying on the SM's other workgroup) on the unguarded whole-block loop, at
    /// K 32 and 16, for one operand only (`ph`), with and without the branch around the
    /// prefetch (`nb`), with the fragment order; two slabs without that branch (`db1_nb1`,
    /// past the budget: does the probe say two workgroups still fit?) and unrolled with
    /// constant stages (`un1`, K 32 and 16), the vector f16 store (`ov1`), on 128×256 blocks of 8 subgroups, and on the
    /// 64×64 / 64×128 / 32×64 blocks BERT's few-block products take (K 32 and 64: fewer,
    /// longer steps where the step's latency, not the matrix units, sets the time); and the
    /// grouped order `sw8`.
    pub fn prefetch() -> Vec<CoopTune> {
        // Most informative first (`COOP_AB_BUDGET_S` may cut the list short); 4096³-class
        // and BERT-class (few-block) candidates interleaved.
        [
            "fi1_cl1_vs4_uc1_da1",
            "fi1_cl1_vs4_uc1_xs2",
            "fi1_cl1_vs4_uc1_xs24",
            "fi1_cl1_vs4_uc1_rp1",
            "fi1_cl1_vs4_uc1_rp1_nb1",
            "w2x2_t2x2_k64_fi1_cl1_vs4_uc1",
            "db1_fi1_cl1_vs4_uc1_un1",
            "fi1_cl1_vs4_uc1_rp1_ph1_nb1",
            "w2x2_t2x2_k32_fi1_cl1_vs4_uc1_rp1_nb1",
            "fi1_cl1_vs4_uc1_ov1",
            "w2x2_t2x2_k32_fi1_cl1_vs4_uc1_ov1",
            "db1_fi1_cl1_vs4_uc1_nb1",
            "k16_db1_fi1_cl1_vs4_uc1_un1",
            "fi1_cl1_vs4_uc1_rp1_ph2_nb1",
            "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_rp1_nb1",
            "w2x4_t4x4_k32_fi1_cl1_vs4_uc1_rp1_nb1",
            "w2x2_t2x4_k32_fi1_cl1_vs4_uc1_rp1_nb1",
            "k16_fi1_cl1_vs4_uc1_rp1_nb1",
            "fi1_cl1_vs4_uc1_sw8",
            "w2x2_t1x2_k64_fi1_cl1_vs4_uc1_rp1_nb1",
            "fi1_cl1_vs4_uc1_rp1_fo1_nb1",
            // One workgroup of 8 subgroups per SM on 128×256 / 256×128 blocks (a quarter
            // less L2 traffic per flop than two 128×128 workgroups): two unrolled K-16 slabs,
            // or A read directly.
            "k64_fi1_cl1_vs4_uc1_da1",
            "w2x4_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1",
            "w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1",
            "w2x4_t4x4_k32_fi1_cl1_vs4_uc1_da1",
            "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_da1",
            "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1",
        ]
        .iter()
        .map(|t| CoopTune::parse(t).expect("prefetch tune"))
        .collect()
    }

    /// The 11th session's candidates (`COOP_AB=occupancy`): the default's time split by the
    /// timing probes (`pr1` no store, `pr2` no global loads in the loop, `pr3` no products),
    /// register prefetch with `su` staging (`rp1`: the next slab's 8-byte units in registers
    /// during the products), two K-16 slabs (unrolled, `un1`, or the register ring, `rq1`)
    /// with unpadded A rows (`pa0`: 20992 bytes, so two workgroups per SM — they ran at one,
    /// 25088 bytes, in the 10th session), and the 8-subgroup blocks with `su3` staging.
    pub fn occupancy() -> Vec<CoopTune> {
        [
            "fi1_cl1_vs4_uc1_ov1_su3_pr1",
            "fi1_cl1_vs4_uc1_ov1_su3_pr2",
            "fi1_cl1_vs4_uc1_ov1_su3_pr3",
            "fi1_cl1_vs4_uc1_ov1_su3_rp1",
            "k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0",
            "k16_db1_fi1_cl1_vs4_uc1_rq1_ov1_pa0",
            "k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1",
            "fi1_cl1_vs4_uc1_ov1_su3_rp1_ph1",
            "fi1_cl1_vs4_uc1_ov1_su3_rp1_ph2",
            "w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3",
            "w2x4_t4x2_k32_fi1_cl1_vs4_uc1_ov1_su3",
            "w4x2_t2x4_k32_fi1_cl1_vs4_uc1_ov1_su3",
        ]
        .iter()
        .map(|t| CoopTune::parse(t).expect("occupancy tune"))
        .collect()
    }

    /// The 11th session's call-B candidates (`COOP_AB` names them): call A put the 128×128
    /// default's global→shared staging at the limit (`pr2`, no global loads, 410 TFLOP/s at
    /// 4096³; `pr3`, no products, 325; the default 224–227), so these cut the global traffic
    /// per product by 25% with 256×128 / 128×256 blocks of 8 subgroups of 64×64 (one workgroup
    /// per SM by registers and memory) and keep the next slab in registers under the products:
    /// `rp1` with `su3` units (`ph1`: B's alone, 8 registers, if 24 spill), or two K-16 slabs
    /// with `su1` units (`un1`, unpadded A); and `rp1` on the 64×64 K-64 tune that shapes below
    /// `COOP_LARGE_BLOCKS` blocks run. Call B measured every wide block slower (175–204 TFLOP/s
    /// at 4096³ vs 236–239 for the 128×128 `rp1`): they stay candidates for `COOP_AB` only.
    pub fn wide() -> Vec<CoopTune> {
        [
            "w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1",
            "w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1_ph1",
            "w2x4_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1",
            "w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1",
            "w2x4_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1",
            "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_rp1",
        ]
        .iter()
        .map(|t| CoopTune::parse(t).expect("wide tune"))
        .collect()
    }

    /// The tunes `bench_coop_sweep` times (one process each): one-factor variations around the
    /// generation-1 shape, wider/taller workgroups, and the direct-load family.
    pub fn sweep() -> Vec<CoopTune> {
        let d = CoopTune::default();
        let mut v = Vec::new();
        for (pad, db, bk) in [
            (8, false, 32),
            (8, true, 32),
            (0, false, 32),
            (0, true, 32),
            (8, false, 16),
            (8, true, 16),
            (8, false, 64),
        ] {
            v.push(CoopTune { pad, db, bk, ..d });
        }
        let grids = [
            (2, 4, 4, 2),
            (4, 2, 2, 4),
            (2, 4, 4, 4),
            (4, 2, 4, 4),
            (2, 2, 2, 2),
            (2, 2, 4, 2),
            (2, 2, 2, 4),
            (1, 1, 4, 4),
            (2, 1, 4, 4),
        ];
        for (wm, wn, tm, tn) in grids {
            for db in [false, true] {
                v.push(CoopTune { wm, wn, tm, tn, db, ..d });
            }
        }
        for (wm, wn, tm, tn) in [(2, 2, 4, 4), (2, 4, 4, 2), (4, 2, 2, 4), (2, 2, 2, 2)] {
            v.push(CoopTune { wm, wn, tm, tn, pi: true, ..d });
        }
        v
    }
}
