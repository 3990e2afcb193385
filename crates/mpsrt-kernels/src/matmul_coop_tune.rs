//! The knobs of generation 3's cooperative-matrix GEMM family ([`CoopTune`]): their text form
//! (what `MPSRT_COOP_VARIANT` takes), the checks the renderer applies, which knobs are not yet
//! trusted on hardware, and the lists of tunes `bench_coop_sweep` times. The kernels themselves
//! are rendered by `matmul_coop_family.rs`.

/// The lists of tunes the benchmarks time (`CoopTune::sweep`, `::wide`, ...).
#[path = "matmul_coop_lists.rs"]
mod lists;

/// One member of the kernel family (see the module doc for each knob).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopTune {
    pub wm: u8,
    pub wn: u8,
    pub tm: u8,
    pub tn: u8,
    pub bk: u8,
    pub pad: u8,
    pub db: bool,
    pub fi: bool,
    pub dg: bool,
    /// Word-typed memory: slabs and operands bound as `u32` words and cooperative tiles loaded
    /// through `u32` pointers (strides in words), as NVIDIA's own cooperative-matrix samples do
    /// with `uvec4` buffers; staging stores whole words. Vulkan only: Metal's simdgroup loads
    /// take the element type's pointer, so the planner never picks it for 8×8 tiles.
    pub wl: bool,
    /// Predicated interior loads: one K loop for every workgroup whose global loads skip the
    /// bounds checks when the block is interior (`full || in bounds`), with no branch around
    /// the cooperative operations (the `fi` branch measured wrong on the H100).
    pub pi: bool,
    /// Vector-typed slabs: 0 (slabs of `f16`), 2 or 4: a slab fed by 8-wide staging is an
    /// array of `vec2<f16>` / `vec4<f16>` (the `f16vec2` shared arrays of llama.cpp's
    /// cooperative-matrix shader), so each 16-byte staging store is 2 or 4 stores instead of 8,
    /// and the cooperative loads take a vector pointer (stride in vectors) whose type carries
    /// the row alignment. Scalar-staged operands keep `f16` slabs.
    pub vs: u8,
    /// One slab buffer with register prefetch (the structure of NVIDIA's
    /// `vk_cooperative_matrix_perf` shader): after the barrier that publishes slab `k`, the
    /// 16-byte global loads of slab `k + 1` go to registers and land in workgroup memory after
    /// the products (two barriers per step, half the memory of `db`).
    pub rp: bool,
    /// Unchecked shader module: the launcher creates the pipeline without wgpu's runtime
    /// checks (naga's index clamping of every workgroup and storage access, and its loop
    /// bounding), which the kernel does not need — every access is in bounds by construction
    /// (explicit guards on global loads and edge stores). The WGSL is the same.
    pub uc: bool,
    /// Grouped workgroup order (0: row-major over the output blocks): consecutive workgroups
    /// walk `sw` block-rows down before moving right, so the workgroups in flight share
    /// A and B blocks in L2.
    pub sw: u8,
    /// Branch-free bounds checks: a checked global load reads a clamped address (always
    /// inside the operand) and selects zero outside M/N/K, so a step's loads issue together
    /// (a branch per load serialized them: the unguarded interior path `fi1` ran 4096³ at
    /// 186 TFLOP/s against 90 for the same kernel with branches, H200 call 2); any shape.
    pub cl: bool,
    /// Split prefetch (with `db`): the next slab of A is loaded into registers before the
    /// first half of the slab's products and stored after them, B's around the second half,
    /// so only half the staging registers are live beside the 4×4 tiles' accumulators (two
    /// slabs with the whole prefetch, `db1` at K 32, spilled: 27 TFLOP/s at 4096³).
    pub sp: bool,
    /// 16-byte global loads: operands staged 8 wide are bound as `vec4<u32>` (one 16-byte
    /// load per 8 halves, alignment known from the type; `vec4<f16>` elements are 8 bytes, so
    /// the driver cannot merge their pairs) and bitcast into the `vec4<f16>` registers.
    pub gl: bool,
    /// Fragment order: a K step's B tiles are loaded first and each A tile right before its
    /// row of products, so one A fragment (not `tm`) is live beside the `tn` B fragments and
    /// the accumulators (the register budget of 4×4 tiles is where two slabs or K 64 fell off
    /// a cliff).
    pub fo: bool,
    /// No store scratch: kernels of whole blocks storing f32 straight to the output declare
    /// no workgroup scratch (`alpha != 1` is applied in place after a storage barrier), 4 KiB
    /// less workgroup memory — two slabs of K 16 then fit the budget that keeps two
    /// workgroups per SM (`COOP_SHARED_BUDGET`).
    pub ns: bool,
    /// Register ring (with `db`): two sets of staging registers take turns, so a slab's
    /// 16-byte global loads are issued two K steps before its products instead of one; the
    /// loop is unrolled by two (constant stages and sets). Interior loop with both operands
    /// 8 wide only; elsewhere the `db` loop. Wrong on the H100 in the 8th session (max rel
    /// err 1.36) while its odd last step ran inside an `if`; without it (K a multiple of two
    /// steps, [`CoopTune::aligned_k`]) it checked correct there (10th session call 3), and
    /// stays slower than one slab (122 vs 224 TFLOP/s at 4096³). With `su` `rp1` (no `ph`):
    /// two register sets ahead of the one slab (11th session, H100 call C: 227.5–235.7 TFLOP/s
    /// at 4096³ vs 233.2–239.9 for `rp1` alone; opt-in).
    pub rq: bool,
    /// Extra workgroup memory in KiB (0: none), declared and touched on a path that never
    /// runs (`K == 0xffffffff`), so the driver reserves it: an occupancy probe. With `xs` the
    /// same kernel is timed at growing workgroup-memory sizes, which says where NVIDIA's
    /// driver stops placing two workgroups on an SM (the cliff [`COOP_SHARED_BUDGET`] is set
    /// from) without changing anything else. Diagnostic: never chosen by the planner.
    ///
    /// [`COOP_SHARED_BUDGET`]: crate::matmul_coop_store::COOP_SHARED_BUDGET
    pub xs: u8,
    /// Half prefetch (with `rp`): only B's next slab is held in registers (`ph1`; A is loaded
    /// and stored between the two barriers, as without `rp`) or only A's (`ph2`): half of
    /// `rp`'s 32 staging registers per thread beside the 4×4 tiles' 128 accumulator registers.
    pub ph: u8,
    /// No branch around the next slab's prefetch (`rp` / `db`): checked loads are bounded by
    /// K already and whole-block loops clamp the next slab to the last one, so the loads are
    /// issued unconditionally (the branch on the loop counter may keep the compiler from
    /// hoisting them above the products).
    pub nb: bool,
    /// Two slabs unrolled (with `db`): the whole-block loop (both operands 8 wide) runs two
    /// K steps per iteration, one per stage, so every matrix load's stage offset is a
    /// constant (the `db` loop's `st` select may be what made two slabs 2–7× slower than
    /// one), prefetching without a branch; other loops keep `db`'s. Wrong on the H100 in the 9th
    /// session (max rel err 1.3) while its odd last step ran inside an `if`; without it (whole
    /// blocks need K to be a multiple of two steps, [`CoopTune::aligned_k`]) it checked correct
    /// there (10th session calls 1 and 2), but slower than one slab.
    pub un: bool,
    /// Vector f16 output: kernels of whole blocks writing f16 store four outputs per store
    /// (`out` as `array<vec4<f16>>`) from the row scratch, instead of one half per store.
    pub ov: bool,
    /// A direct: on whole blocks with both operands row-major and 16-byte aligned (one slab,
    /// no `rp`/`db`/`dg`), each subgroup reads its A fragments with `coopLoadT` straight from
    /// the storage buffer at the top of the step (in flight with B's staging); only B goes
    /// through workgroup memory (the 4×4 default then needs 12.7 KB instead of 23).
    pub da: bool,
    /// L1 prefetch distance in K steps (0: none; the one-slab whole-block loop or the unrolled
    /// two-slab one, both operands 8 wide): each step, half of the subgroups (alternating)
    /// touch one half per 32-byte sector of slab `k + lp` (clamped to the last), so it is in
    /// the SM's L1 by the time its real
    /// loads run, and add the values they loaded two steps earlier into a sum stored on a path
    /// that never runs (a load the compiler cannot drop). Bytes in flight without the 32
    /// staging registers per slab that register prefetch costs: the 4×4 tiles' 218 registers
    /// and the ~48 KiB of workgroup memory per SM leave no room for a deeper register pipeline.
    /// On the `su` `rp1` loop and its `rq1` ring every thread touches its share each step (one
    /// register per 32-byte sector held one step: four at 128×128, K 32).
    pub lp: u8,
    /// Staging in 8-byte units (one-slab whole-block loop, both operands 8 wide in `vs4`
    /// slabs): lane `i` of a warp loads and stores unit `i` of a run of 32 consecutive
    /// `vec4<f16>`, so each load instruction reads 256 contiguous bytes and each store writes
    /// them without bank conflicts (a lane per 16 bytes, two 8-byte instructions, leaves every
    /// other 8 bytes of each instruction's span unused and two lanes per bank in B's rows).
    /// `su2`: A's units go to the lanes in blocks of 8 rows × 4 units (a half-warp on 8 rows
    /// × 16 bytes), so A's stores are free of bank conflicts too where its rows are 64 bytes
    /// (K 32: two 64-byte rows 80 bytes apart share banks); B as with `su1`. `su3`: A's warp
    /// on 4 rows × 64 bytes as with `su1` (whole 64-byte row segments per load), its
    /// half-warps on rows `r` and `r + 4` (distinct banks).
    pub su: u8,
    /// Workgroups per SM the f16 store's scratch is sized for (0: two, the
    /// [`COOP_SHARED_BUDGET`]; 3: 15360 bytes, one tile per group): with K 16 a 128×128 tune
    /// then needs 14.25 KiB, so three workgroups fit NVIDIA's ~48 KiB if the registers allow
    /// (12 warps at ≤ 160 a lane; `COOP_STATS` reports the count).
    ///
    /// [`COOP_SHARED_BUDGET`]: crate::matmul_coop_store::COOP_SHARED_BUDGET
    pub oc: u8,
    /// A's slab row padding in halves where it differs from `pad` (`pa0`: none). At K 16 an
    /// unpadded A row is 32 bytes (2-way bank conflicts in its fragment loads) and two K-16
    /// slabs of the 128×128 block then take 16.5 KiB instead of 20.5: with the f16 store's
    /// scratch 20992 bytes, inside the two-workgroups-per-SM budget (`db1` with `un1`/`rq1`
    /// measured 118–122 TFLOP/s at 4096³ at 25088 bytes, one workgroup per SM).
    pub pa: Option<u8>,
    /// Timing probe (diagnostic, wrong results; never chosen by the planner) on the one-slab
    /// whole-block loop with `su` staging: `pr1` stores the output only on a path that never
    /// runs (`K == 0xffffffff`: the K loop without the store), `pr2` loads the first slab
    /// once and re-stages it every step (no global loads in the loop), `pr3` stages every
    /// slab but runs the products of the last one only (loads, stores and barriers alone);
    /// `pr4` stages one slab and runs its products every step (fragment loads from workgroup
    /// memory and matrix products, no staging, no barrier), `pr5` only the matrix products
    /// on fragments loaded once (the matrix units' rate through this driver). `pr6` (the
    /// `su` `rp1` `rq1` ring) refills its register sets from slab 0 every step: the whole
    /// kernel with its global loads served by L1 instead of L2; `pr7` only B's refills, `pr8`
    /// only A's.
    /// Which share of a step each part takes says which one to attack.
    pub pr: u8,
    /// Early loads (with `su` `rp1`, no `ph`/`rq`): the next slab's global loads are issued
    /// right after this slab's stores, before the barrier that publishes it, so the barrier's
    /// wait runs with them in flight (without it they start after that barrier).
    pub el: bool,
    /// Affine unit addresses (with `su` staging, where the workgroup's threads cover whole slab
    /// rows): a thread's unit `j` is its unit 0 moved by `j` uniform row steps, so the loads
    /// take one per-thread offset plus uniform steps and the stores constant slab offsets,
    /// instead of per-unit index arithmetic the compiler keeps in registers (`rq1`'s two
    /// register sets spilled at 255 registers).
    pub ad: bool,
    /// The f16 store's per-subgroup scratch synchronized with `subgroupBarrier` instead of
    /// `workgroupBarrier` (each subgroup reads back only its own tiles): the 4×4 tiles' store
    /// takes 32 workgroup barriers, where the subgroups wait for each other.
    pub sb: bool,
    /// K rotation (the `su` `rp1` loop and its `rq1` ring): block `(i, j)` walks its K slabs
    /// starting at slab `(i + j) mod (K / bk)` and wraps, so the workgroups of a wave that
    /// share an A slab (one block-row) or a B slab (one block-column) read it at different
    /// times instead of all at once (the same L2 lines hit by 32 SMs together), and
    /// concurrent requests spread over more address bits. f32 sums in another order.
    pub kr: bool,
    /// A pairs (the `su` `rp1` `rq1` ring of the 128×128 K-32 tune): A's next two slabs are
    /// loaded together every other step, so each load covers whole 128-byte lines (a K-32
    /// slab row is half a line: four lines per warp load against B's two).
    pub ap: bool,
    /// 16-byte staging units on the `su` `ad1` loops of whole blocks (`xw1` B, `xw2` A, `xw3`
    /// both): the operand is bound as 16-byte elements and each load fills two of the 8-byte
    /// registers, half the load instructions of `su`'s 8-byte units.
    pub xw: u8,
    /// Half steps (the `su` `rp1` `rq1` `ad1` ring of the 2×2 4×4 K-32 tune): the slab's two
    /// K-16 halves work as two stages, one barrier per half, the next chunk's stores beside
    /// this one's products (no store-only phase between two barriers).
    pub hs: bool,
    /// Where the `su` `rp1` `rq1` ring issues a step's global loads: 0 before the products,
    /// `lo1` between their two K-16 halves, `lo2` after them — so the step's first fragment
    /// loads from workgroup memory are not queued behind 16 global loads.
    pub lo: u8,
    /// Row store for f32 outputs: an f32 output of generation 3 goes through the per-subgroup
    /// row scratch as the f16 output does (with `ov1` on whole blocks four f32 per store, each
    /// lane on consecutive columns) instead of `coopStoreT` from the accumulators straight to
    /// the output, whose scattered 8-byte writes made the 128×128 kernel's f32 output 13%
    /// slower than its f16 one (4096³: 231 vs 265 TFLOP/s, 14th session).
    pub rs: bool,
}

impl Default for CoopTune {
    fn default() -> Self {
        CoopTune {
            wm: 2,
            wn: 2,
            tm: 4,
            tn: 4,
            bk: 32,
            pad: 8,
            db: false,
            fi: false,
            dg: false,
            wl: false,
            pi: false,
            vs: 0,
            rp: false,
            uc: false,
            sw: 0,
            cl: false,
            sp: false,
            gl: false,
            fo: false,
            ns: false,
            rq: false,
            xs: 0,
            ph: 0,
            nb: false,
            un: false,
            ov: false,
            da: false,
            lp: 0,
            su: 0,
            oc: 0,
            pa: None,
            pr: 0,
            el: false,
            ad: false,
            sb: false,
            kr: false,
            ap: false,
            xw: 0,
            hs: false,
            lo: 0,
            rs: false,
        }
    }
}

impl CoopTune {
    /// Canonical text form, e.g. `w2x2_t4x4_k32_p8_db0_fi1_dg0`.
    pub fn name(&self) -> String {
        let n = format!(
            "w{}x{}_t{}x{}_k{}_p{}_db{}_fi{}_dg{}_wl{}_pi{}",
            self.wm,
            self.wn,
            self.tm,
            self.tn,
            self.bk,
            self.pad,
            u8::from(self.db),
            u8::from(self.fi),
            u8::from(self.dg),
            u8::from(self.wl),
            u8::from(self.pi)
        );
        // Newer knobs only when set, so the names of earlier measurements stay valid.
        let mut n = n;
        if self.vs != 0 {
            n.push_str(&format!("_vs{}", self.vs));
        }
        if self.sw != 0 {
            n.push_str(&format!("_sw{}", self.sw));
        }
        if self.xs != 0 {
            n.push_str(&format!("_xs{}", self.xs));
        }
        if self.ph != 0 {
            n.push_str(&format!("_ph{}", self.ph));
        }
        if self.lp != 0 {
            n.push_str(&format!("_lp{}", self.lp));
        }
        if self.su != 0 {
            n.push_str(&format!("_su{}", self.su));
        }
        if self.oc != 0 {
            n.push_str(&format!("_oc{}", self.oc));
        }
        if let Some(pa) = self.pa {
            n.push_str(&format!("_pa{pa}"));
        }
        if self.pr != 0 {
            n.push_str(&format!("_pr{}", self.pr));
        }
        if self.xw != 0 {
            n.push_str(&format!("_xw{}", self.xw));
        }
        if self.lo != 0 {
            n.push_str(&format!("_lo{}", self.lo));
        }
        for (on, tok) in [
            (self.rp, "_rp1"),
            (self.cl, "_cl1"),
            (self.uc, "_uc1"),
            (self.sp, "_sp1"),
            (self.gl, "_gl1"),
            (self.fo, "_fo1"),
            (self.ns, "_ns1"),
            (self.rq, "_rq1"),
            (self.nb, "_nb1"),
            (self.un, "_un1"),
            (self.ov, "_ov1"),
            (self.da, "_da1"),
            (self.sb, "_sb1"),
            (self.kr, "_kr1"),
            (self.ap, "_ap1"),
            (self.hs, "_hs1"),
            (self.el, "_el1"),
            (self.ad, "_ad1"),
            (self.rs, "_rs1"),
        ] {
            if on {
                n.push_str(tok);
            }
        }
        n
    }

    /// Parse the text form; tokens may come in any order and missing ones keep the default.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut t = CoopTune::default();
        let bad = |tok: &str| {
            format!("cooperative variant token '{tok}' in '{text}' is not one of wAxB, tAxB, kN, pN, db0/1, fi0/1, dg0/1, wl0/1, pi0/1, vs0/2/4, sw0/2/4/8/16, rp0/1, cl0/1, uc0/1, sp0/1, gl0/1, fo0/1, ns0/1, rq0/1, xsN (KiB), ph0/1/2, nb0/1, un0/1, ov0/1, da0/1, lpN (steps), su0/1/2/3, oc0/2/3, paN, pr0..8, el0/1, ad0/1, sb0/1, kr0/1, ap0/1, xw0..3, hs0/1, lo0..2")
        };
        let pair = |v: &str, tok: &str| -> Result<(u8, u8), String> {
            let (a, b) = v.split_once('x').ok_or_else(|| bad(tok))?;
            Ok((a.parse().map_err(|_| bad(tok))?, b.parse().map_err(|_| bad(tok))?))
        };
        let flag = |v: &str, tok: &str| match v {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(bad(tok)),
        };
        for tok in text.split(['_', ',']).map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(v) = tok.strip_prefix("oc") {
                t.oc = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("pa") {
                t.pa = Some(v.parse().map_err(|_| bad(tok))?);
            } else if let Some(v) = tok.strip_prefix("pr") {
                t.pr = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("ad") {
                t.ad = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("el") {
                t.el = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("sb") {
                t.sb = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("kr") {
                t.kr = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("ap") {
                t.ap = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("lo") {
                t.lo = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("hs") {
                t.hs = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("xw") {
                t.xw = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("su") {
                t.su = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("lp") {
                t.lp = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("db") {
                t.db = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("fi") {
                t.fi = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("pi") {
                t.pi = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("wl") {
                t.wl = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("vs") {
                t.vs = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("sw") {
                t.sw = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("da") {
                t.da = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("ov") {
                t.ov = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("un") {
                t.un = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("nb") {
                t.nb = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("ph") {
                t.ph = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("xs") {
                t.xs = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix("rs") {
                t.rs = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("rq") {
                t.rq = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("ns") {
                t.ns = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("fo") {
                t.fo = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("gl") {
                t.gl = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("sp") {
                t.sp = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("cl") {
                t.cl = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("rp") {
                t.rp = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("uc") {
                t.uc = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("dg") {
                t.dg = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('w') {
                (t.wm, t.wn) = pair(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('t') {
                (t.tm, t.tn) = pair(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('k') {
                t.bk = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix('p') {
                t.pad = v.parse().map_err(|_| bad(tok))?;
            } else {
                return Err(bad(tok));
            }
        }
        Ok(t)
    }

    /// Why this tune is not trusted, if it is not; the launcher runs generation 1 instead
    /// unless `MPSRT_COOP_EXPERIMENTAL=1`. `wl1` kernels failed NVIDIA's shader compiler
    /// (H100, session11 call A, driver 580). `fi1`/`dg1` measured
    /// wrong on the H100 in their branched form (session11 call A), which the launcher no
    /// longer renders: it keeps them only for whole-block products (`CoopMatmulSpec::aligned`,
    /// no branch), where they checked correct on the H200 (session12 call 2), as did every
    /// `vs`/`rp`/`uc`/`sw` kernel, and every `cl` kernel in call 4.
    pub fn unverified(&self) -> Option<&'static str> {
        if self.wl {
            Some("wl1: NVIDIA's compiler rejects u32-pointer cooperative loads (driver 580)")
        } else {
            None
        }
    }

    /// A's slab row padding in halves (`pa`, else `pad`).
    pub fn a_pad(&self) -> u8 {
        self.pa.unwrap_or(self.pad)
    }

    /// What K must be a multiple of for the whole-block (`aligned`) kernel: the K step, or
    /// two steps for the loops unrolled by two (`un1`, `rq1`), which have no branch for an
    /// odd last step (cooperative operations inside an `if` measured wrong on the H100).
    pub fn aligned_k(&self) -> u32 {
        u32::from(self.bk) * if (self.db && self.un) || self.rq { 2 } else { 1 }
    }

    /// Whether the renderer accepts this tune for tiles of `size`.
    pub fn check(&self, size: u32) -> Result<(), String> {
        let p2 = |v: u8, hi: u8| v.is_power_of_two() && v <= hi;
        if !p2(self.wm, 4) || !p2(self.wn, 4) || self.wm * self.wn > 8 {
            return Err(format!(
                "{}: subgroup grid must be ≤ 8 subgroups, 1/2/4 a side",
                self.name()
            ));
        }
        // Up to 32 tiles per subgroup (4×8 / 8×4: 32 f32 accumulators of 8 registers a lane
        // on NVIDIA, at the register file's edge; timed, not assumed).
        if !p2(self.tm, 8) || !p2(self.tn, 8) || self.tm * self.tn > 32 {
            return Err(format!("{}: at most 32 tiles per subgroup, 1..8 a side", self.name()));
        }
        let bk = u32::from(self.bk);
        if bk % size != 0 || bk % 8 != 0 || !(8..=64).contains(&bk) {
            return Err(format!(
                "{}: K step must be a multiple of {size} and 8, ≤ 64",
                self.name()
            ));
        }
        if !self.pad.is_multiple_of(8) || self.pad > 16 {
            return Err(format!("{}: pad must be 0, 8 or 16 halves", self.name()));
        }
        if self.pa.is_some_and(|p| !p.is_multiple_of(8) || p > 16) {
            return Err(format!("{}: A's pad (pa) must be 0, 8 or 16 halves", self.name()));
        }
        let ring = self.rp && self.rq && self.su != 0 && self.ph == 0;
        if self.pr > 8
            || (self.pr >= 6 && !ring)
            || (matches!(self.pr, 1..=5) && (self.su == 0 || self.rp))
        {
            return Err(format!(
                "{}: the timing probe (pr1..pr5) is for the one-slab su loop (not rp1), pr6..pr8 for su rp1 rq1",
                self.name()
            ));
        }
        // Vector-pointer cooperative loads are Vulkan's (stride in vectors); naga's MSL
        // writer passes them to Metal's element-pointer `simdgroup_load`: 16×16 tiles only
        // (NVIDIA), never Apple's 8×8.
        if !matches!(self.vs, 0 | 2 | 4) || (self.vs != 0 && (self.wl || size != 16)) {
            return Err(format!(
                "{}: vector slabs (vs) must be 0, 2 or 4 halves wide, with 16×16 tiles and not with word slabs (wl)",
                self.name()
            ));
        }
        if !matches!(self.sw, 0 | 2 | 4 | 8 | 16) {
            return Err(format!("{}: sw must be 0, 2, 4, 8 or 16 block-rows", self.name()));
        }
        if self.cl && (self.wl || self.pi) {
            return Err(format!(
                "{}: clamped loads (cl) replace pi's guards and are not rendered for wl",
                self.name()
            ));
        }
        if self.sp && (!self.db || bk < 2 * size) {
            return Err(format!(
                "{}: split prefetch (sp) needs two slabs (db1) and at least two tile steps of K",
                self.name()
            ));
        }
        if self.gl && self.wl {
            return Err(format!("{}: 16-byte loads (gl) are wl's already", self.name()));
        }
        if self.rq && !((self.db && !self.sp) || (self.rp && self.su != 0 && self.ph == 0)) {
            let n = self.name();
            return Err(format!(
                "{n}: the register ring (rq) needs db1 (not sp1) or su rp1 (no ph)"
            ));
        }
        if self.un && (!self.db || self.sp || self.rq) {
            return Err(format!("{}: un (unrolled slabs) needs db1, not sp1 or rq1", self.name()));
        }
        if self.nb && !(self.rp || self.db) {
            return Err(format!("{}: nb (no prefetch branch) needs rp1 or db1", self.name()));
        }
        if self.ph > 2 || (self.ph != 0 && !self.rp) {
            return Err(format!("{}: half prefetch (ph) is 1 (B) or 2 (A), with rp1", self.name()));
        }
        if self.xs > 40 {
            return Err(format!("{}: extra workgroup memory (xs) is at most 40 KiB", self.name()));
        }
        let rp_su = self.rp && self.su != 0 && self.ph == 0;
        let lp_loop = ((!self.db || self.un || self.rq) && !self.rp && !self.da) || rp_su;
        if self.lp > 4 || (self.lp != 0 && (!lp_loop || self.wm * self.wn < 2)) {
            return Err(format!(
                "{}: L1 prefetch (lp) is 1..4 steps, on the one-slab loop (not rp1 or da1), the unrolled two-slab one (db1 with un1 or rq1) or the su rp1 loop, of at least two subgroups",
                self.name()
            ));
        }
        let two_slab = self.db && !(self.un && !self.rq && self.lp == 0);
        if self.su > 3 || (self.su != 0 && (two_slab || self.da || self.vs != 4 || self.gl)) {
            return Err(format!(
                "{}: 8-byte-unit staging (su1..su3) is for the one-slab loop or un1's two unrolled slabs (not rq1, lp, da1, gl1) with vs4 slabs",
                self.name()
            ));
        }
        if !matches!(self.oc, 0 | 2 | 3) {
            return Err(format!("{}: oc (workgroups per SM) is 2 or 3", self.name()));
        }
        if self.ad && self.su == 0 {
            return Err(format!("{}: affine unit addresses (ad1) are for su staging", self.name()));
        }
        if self.el && !(self.rp && self.su != 0 && self.ph == 0 && !self.rq) {
            return Err(format!(
                "{}: early loads (el1) are for the su rp1 loop (no ph, no rq)",
                self.name()
            ));
        }
        if self.kr && !(rp_su && self.pr == 0) {
            return Err(format!(
                "{}: K rotation (kr1) is for the su rp1 loop and its rq1 ring (no ph, no probe)",
                self.name()
            ));
        }
        let geometry = (self.wm, self.wn, self.tm, self.tn, self.bk) == (2, 2, 4, 4, 32);
        if self.ap && !(ring && geometry && self.pr == 0 && !self.kr && self.lp == 0) {
            return Err(format!(
                "{}: A pairs (ap1) are for the su rp1 rq1 ring of the 2x2 4x4 K-32 tune (no kr, lp, probe)",
                self.name()
            ));
        }
        if self.xw > 3 || (self.xw != 0 && !(self.ad && self.su == 3 && self.lp == 0 && !self.ap)) {
            return Err(format!(
                "{}: 16-byte units (xw1..3) are for su3 staging with ad1 (no lp, ap)",
                self.name()
            ));
        }
        let plain_ring = ring && self.ad && self.su == 3 && self.pr == 0 && !self.kr;
        if self.hs && !(plain_ring && geometry && self.lp == 0 && !self.ap && self.xw == 0) {
            return Err(format!(
                "{}: half steps (hs1) are for the su3 rp1 rq1 ad1 ring of the 2x2 4x4 K-32 tune (no kr, lp, ap, xw, probe)",
                self.name()
            ));
        }
        let lo_ring = ring && !self.ap && !self.hs && self.bk >= 32;
        if self.lo > 2 || (self.lo != 0 && !lo_ring) {
            return Err(format!(
                "{}: the refill position (lo1, lo2) is for the su rp1 rq1 ring (not ap1, hs1), K step >= 32",
                self.name()
            ));
        }
        if self.rp && self.db {
            return Err(format!(
                "{}: register prefetch (rp) is the one-slab form; db has its own",
                self.name()
            ));
        }
        Ok(())
    }
}

/// The 11th session's candidate rules for call B's model-level A/B: `rp1` on the 128×128 tune
/// (`MPSRT_COOP_PLANNER=11`, now the default rule) and with `small_too` on the 64×64 K-64
/// tune too (`12`: no win on BERT's shapes in call B); 8×8 tiles: generation 1. Pure.
pub fn default_coop_variant_rp(
    size: u32,
    mnk: [usize; 3],
    small_too: bool,
) -> crate::matmul_coop::CoopVariant {
    use crate::matmul_coop::CoopVariant;
    match default_coop_variant_11th(size, mnk) {
        CoopVariant::Family(t) if t.bk == 32 || small_too => {
            CoopVariant::Family(CoopTune { rp: true, ..t })
        }
        v => v,
    }
}

/// The 10th session's planner default, kept for A/B (`MPSRT_COOP_PLANNER=10`): the current
/// rule without register prefetch on the 128×128 tune (`fi1_cl1_vs4_uc1_ov1_su3`). Pure.
pub fn default_coop_variant_10th(size: u32, mnk: [usize; 3]) -> crate::matmul_coop::CoopVariant {
    use crate::matmul_coop::CoopVariant;
    match default_coop_variant_11th(size, mnk) {
        CoopVariant::Family(t) => CoopVariant::Family(CoopTune { rp: false, ..t }),
        v => v,
    }
}

/// The 11th session's planner default, kept for A/B (`MPSRT_COOP_PLANNER=11`): the current
/// rule without the two register sets and affine addresses (`rq1`, `ad1`): the 128×128 tune
/// `fi1_cl1_vs4_uc1_ov1_su3_rp1` from 128 blocks, the 64×64 K-64 tune without `ad1` below. Pure.
pub fn default_coop_variant_11th(size: u32, mnk: [usize; 3]) -> crate::matmul_coop::CoopVariant {
    use crate::matmul_coop::CoopVariant;
    match crate::matmul_coop::default_coop_variant(size, mnk) {
        CoopVariant::Family(t) => CoopVariant::Family(CoopTune { rq: false, ad: false, ..t }),
        v => v,
    }
}

/// The 8th session's planner default, kept for A/B (`MPSRT_COOP_PLANNER=8`): the 128×128
/// tune from 128 blocks of 128×128, below them the 64×64 tune with K 32 and no vector store
/// (`w2x2_t2x2_k32_cl1_vs4_uc1`); 8×8 tiles: generation 1. Pure.
pub fn default_coop_variant_8th(size: u32, mnk: [usize; 3]) -> crate::matmul_coop::CoopVariant {
    use crate::matmul_coop::CoopVariant;
    if size != 16 {
        return CoopVariant::Gen1;
    }
    let blocks = mnk[0].div_ceil(128) * mnk[1].div_ceil(128);
    let d = CoopTune::default();
    CoopVariant::Family(if blocks >= 128 {
        CoopTune { fi: true, cl: true, vs: 4, uc: true, ..d }
    } else {
        CoopTune { tm: 2, tn: 2, cl: true, vs: 4, uc: true, ..d }
    })
}

/// The 9th session's planner default, kept for A/B (`MPSRT_COOP_PLANNER=9`): the 128×128
/// tune with the vector f16 store (`fi1_cl1_vs4_uc1_ov1`) from 256 blocks of 128×128, below
/// them the 64×64 tune with K 64 (`w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1`); 8×8 tiles:
/// generation 1. Pure.
pub fn default_coop_variant_9th(size: u32, mnk: [usize; 3]) -> crate::matmul_coop::CoopVariant {
    use crate::matmul_coop::CoopVariant;
    if size != 16 {
        return CoopVariant::Gen1;
    }
    let blocks = mnk[0].div_ceil(128) * mnk[1].div_ceil(128);
    let d = CoopTune { fi: true, cl: true, vs: 4, uc: true, ov: true, ..CoopTune::default() };
    CoopVariant::Family(if blocks >= 256 { d } else { CoopTune { tm: 2, tn: 2, bk: 64, ..d } })
}

/// An in-process override of the cooperative GEMM's choices, for benchmarks that time several
/// kernels in one process with the GPU kept busy (`bench_coop_sweep`'s `COOP_AB`), so A/B
/// pairs see the same clock. Each field, when set, replaces its environment knob for every
/// following f16 product: `variant` (`MPSRT_COOP_VARIANT` / the planner's default), `f16_out`
/// (`MPSRT_COOP_F16_OUT`), `splitk` (the split-K workgroup target of `MPSRT_COOP_SPLITK` /
/// `MPSRT_COOP_SPLITK_WGS`; 0 = off). Pipelines stay cached per kernel; plans already recorded
/// keep the pipelines they were built with. Not for production paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoopOverride {
    pub variant: Option<crate::matmul_coop::CoopVariant>,
    pub f16_out: Option<bool>,
    pub splitk: Option<usize>,
}

static OVERRIDE: std::sync::Mutex<CoopOverride> =
    std::sync::Mutex::new(CoopOverride { variant: None, f16_out: None, splitk: None });

/// Set this process's [`CoopOverride`] (`CoopOverride::default()`: back to the knobs).
pub fn set_coop_override(o: CoopOverride) {
    *OVERRIDE.lock().unwrap_or_else(|e| e.into_inner()) = o;
}

/// This process's [`CoopOverride`].
pub fn coop_override() -> CoopOverride {
    *OVERRIDE.lock().unwrap_or_else(|e| e.into_inner())
}
