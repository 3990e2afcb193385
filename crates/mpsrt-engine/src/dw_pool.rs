//! A depthwise conv and the `GlobalAveragePool` of its output as one dispatch (issue 22; GPU
//! places only).
//!
//! Each of EfficientNet-B0's 16 squeeze-excitation blocks pools its depthwise conv's output
//! (`[N, C, H, W]` → `[N, C, 1, 1]`) right after computing it. At batch 1 every dependent
//! dispatch costs a few µs of launch and barrier on NVIDIA, and the pool re-reads the whole
//! map. Here the conv step computes both (`mpsrt_tensor::depthwise_conv_pool`: one workgroup
//! per channel plane stores the conv's outputs and averages them) and the pool step does
//! nothing. The conv's output is bit-identical to the unfused plan's (the same arithmetic as
//! the direct depthwise kernel); the mean is summed in another order than the reduce
//! kernel's, so it matches to float rounding. Where the fused kernel does not take the
//! operands, the conv step runs the two steps after all.
//!
//! On by default; `MPSRT_DW_POOL=0` turns it off, [`crate::Session::with_dw_pool`] per
//! session. Planes larger than 32×32 stay two steps (see `MAX_PLANE`).

use mpsrt_graph::{AutoPad, ConvAttrs, Op, Plan, Step, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The fusion when `MPSRT_DW_POOL` is unset (on: H200, 2026-11-26, with the GEMV SE convs
/// and the gate fold, EfficientNet-B0 batch 1 0.98 ms in three fresh processes against
/// 1.01–1.06 without the gate fold and 1.32–1.34 with none of them).
const DEFAULT_ON: bool = true;

/// Largest output plane (OH·OW) fused.
const MAX_PLANE: usize = 1024;

/// Whether the fusion is on (`MPSRT_DW_POOL`: `0` off, `1` on, unset [`DEFAULT_ON`]).
pub(crate) fn enabled_by_env() -> bool {
    std::env::var("MPSRT_DW_POOL").map_or(DEFAULT_ON, |v| v.trim() != "0")
}

/// A depthwise conv step whose output a `GlobalAveragePool` step reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DwPool {
    /// The conv node, its activation node (a `Conv + activation` epilogue), and its output.
    pub conv: usize,
    pub act: Option<usize>,
    pub y: ValueId,
    /// The pool's step (does nothing) and output.
    pub pool_step: usize,
    pub pooled: ValueId,
}

/// The fused pairs of a plan: conv step → pair.
#[derive(Debug, Default)]
pub(crate) struct DwPools {
    at: HashMap<usize, DwPool>,
    skip: HashSet<usize>,
    /// Runs of a pair that the fused kernel did not take (the two steps ran).
    fallbacks: AtomicUsize,
}

impl DwPools {
    /// Pairs in `plan`, leaving out steps in `taken` (steps another rewrite changes).
    pub(crate) fn new(plan: &Plan, taken: &dyn Fn(usize) -> bool) -> Option<DwPools> {
        let g = &plan.graph;
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (s, step) in plan.steps.iter().enumerate() {
            for v in plan.step_io(step).0 {
                readers.entry(v).or_default().push(s);
            }
        }
        let mut pools = DwPools::default();
        for (s, step) in plan.steps.iter().enumerate() {
            let (anchor, act) = match step {
                Step::Node(j) => (*j, None),
                Step::Epilogue { anchor, bias: None, add: None, activation } => {
                    (*anchor, *activation)
                }
                _ => continue,
            };
            if taken(s) {
                continue;
            }
            let node = &g.nodes[anchor];
            let Op::Conv(ConvAttrs { group, auto_pad, pads, .. }) = &node.op else { continue };
            let [y] = plan.step_io(step).1[..] else { continue };
            let (x, w) = match node.inputs[..] {
                [x, w] | [x, w, _] => (x, w),
                _ => continue,
            };
            let (xs, ws, ys) = (plan.shape(x), plan.shape(w), plan.shape(y));
            let f32s = [x, w, y].iter().all(|&v| g.value(v).dtype == mpsrt_core::DType::F32);
            let depthwise = f32s
                && xs.len() == 4
                && ys.len() == 4
                && ws.len() == 4
                && *group == xs[1]
                && ws[0] == xs[1]
                && ws[1] == 1
                && ys[1] == xs[1]
                && matches!(auto_pad, AutoPad::NotSet | AutoPad::Valid)
                && (pads.is_empty() || pads.len() == 4);
            // A concat part may be written in place by its producer (`concat_inplace.rs`):
            // left to the conv alone.
            let concat_part = readers.get(&y).into_iter().flatten().any(|&r| {
                matches!(&plan.steps[r], Step::Node(j) if matches!(g.nodes[*j].op, Op::Concat { .. }))
            });
            // Small maps only: one workgroup per channel plane leaves a large GPU idle on
            // EfficientNet's first blocks (H200: 32 channels of 112×112, 70 µs fused against
            // 19 + 12 for the two steps; 56×56 planes break even; 28×28 and smaller win).
            let small = ys.len() == 4 && ys[2] * ys[3] <= MAX_PLANE;
            if !depthwise || concat_part || !small {
                continue;
            }
            // The first `GlobalAveragePool` reading `y` (any other readers keep reading it).
            let pool = readers.get(&y).into_iter().flatten().copied().find(|&r| {
                matches!(&plan.steps[r], Step::Node(j)
                    if g.nodes[*j].op == Op::GlobalAveragePool && g.nodes[*j].inputs[..] == [y])
                    && !taken(r)
            });
            let Some(r) = pool else { continue };
            let Step::Node(j) = plan.steps[r] else { continue };
            let [pooled] = g.nodes[j].outputs[..] else { continue };
            if plan.shape(pooled) != [ys[0], ys[1], 1, 1] {
                continue;
            }
            pools.skip.insert(r);
            pools.at.insert(s, DwPool { conv: anchor, act, y, pool_step: r, pooled });
        }
        (!pools.at.is_empty()).then_some(pools)
    }

    /// The pair computed at conv step `s`.
    pub(crate) fn at(&self, s: usize) -> Option<DwPool> {
        self.at.get(&s).copied()
    }

    /// Whether step `s` is a pool the conv before it computed.
    pub(crate) fn skips(&self, s: usize) -> bool {
        self.skip.contains(&s)
    }

    /// Fused pairs, and runs of a pair that ran as two steps after all.
    pub(crate) fn stats(&self) -> (usize, usize) {
        (self.at.len(), self.fallbacks.load(Ordering::Relaxed))
    }

    pub(crate) fn fell_back(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }
}

/// Stride, top/left padding and dilation of a 2-D conv node's attributes.
pub(crate) fn geometry(a: &ConvAttrs) -> ([usize; 2], [usize; 2], [usize; 2]) {
    let two = |v: &[usize]| [v.first().copied().unwrap_or(1), v.get(1).copied().unwrap_or(1)];
    let pads = match a.auto_pad {
        AutoPad::NotSet => {
            [a.pads.first().copied().unwrap_or(0), a.pads.get(1).copied().unwrap_or(0)]
        }
        _ => [0, 0],
    };
    (two(&a.strides), pads, two(&a.dilations))
}
