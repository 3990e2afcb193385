//! Squeeze-excitation's gate `Mul` folded into the conv that reads its product (issue 22;
//! GPU places only).
//!
//! EfficientNet-B0 ends each of its 16 blocks' squeeze-excitation with `m = x · gate` (`x`
//! `[N, C, H, W]`, `gate` `[N, C, 1, 1]`) read only by the block's 1×1 projection conv. At
//! batch 1 every dependent dispatch costs a few µs of launch and barrier on NVIDIA, and the
//! product is a full-size tensor written and read once. Here the `Mul` step does nothing and
//! the conv runs on `x` with the gate as a per-image, per-channel input scale
//! (`mpsrt_tensor::with_conv_input_scale`: the implicit-GEMM kernel multiplies while it
//! gathers its input; other routes multiply first — the same f32 products, so outputs are
//! bit-identical to the unfolded plan). `x` and `gate` stay alive until the conv (the
//! liveness plan moves their release from the `Mul` to the conv).

use mpsrt_core::DType;
use mpsrt_graph::{BinaryOp, Op, Plan, Step, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `MPSRT_GATE_FOLD=0` turns the fold off (to measure it; default on).
pub(crate) fn enabled_by_env() -> bool {
    std::env::var("MPSRT_GATE_FOLD").map_or(true, |v| v.trim() != "0")
}

/// The folded pairs of a plan.
#[derive(Debug, Default)]
pub(crate) struct GateFold {
    /// `Mul` steps that do nothing.
    skip: HashSet<usize>,
    /// Conv step → (the product it reads, `x`, `gate`), and the `Mul` step it replaces.
    at: HashMap<usize, (ValueId, ValueId, ValueId, usize)>,
    /// Runs of a folded conv that no GPU conv kernel took the gate in (the product was
    /// computed after all).
    fallbacks: AtomicUsize,
}

impl GateFold {
    pub(crate) fn new(plan: &Plan) -> Option<GateFold> {
        let g = &plan.graph;
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (s, step) in plan.steps.iter().enumerate() {
            for v in plan.step_io(step).0 {
                readers.entry(v).or_default().push(s);
            }
        }
        let mut fold = GateFold::default();
        for (s, step) in plan.steps.iter().enumerate() {
            let Step::Node(i) = step else { continue };
            let node = &g.nodes[*i];
            if node.op != Op::Binary(BinaryOp::Mul) || node.inputs.len() != 2 {
                continue;
            }
            let Some(&m) = node.outputs.first() else { continue };
            let o = plan.shape(m);
            if o.len() != 4 || g.outputs.contains(&m) {
                continue;
            }
            let gate_shape = [o[0], o[1], 1, 1];
            let (a, b) = (node.inputs[0], node.inputs[1]);
            let (x, gate) = match (plan.shape(a), plan.shape(b)) {
                (sa, sb) if sa == o && sb == gate_shape && sa != sb => (a, b),
                (sa, sb) if sb == o && sa == gate_shape && sa != sb => (b, a),
                _ => continue,
            };
            if [m, x, gate].iter().any(|&v| g.value(v).dtype != DType::F32) {
                continue;
            }
            // Read by exactly one step, once, as the input of a conv.
            let Some([t]) = readers.get(&m).map(Vec::as_slice) else { continue };
            let anchor = match &plan.steps[*t] {
                Step::Node(j) => *j,
                Step::Epilogue { anchor, add, .. } if add.is_none_or(|(_, r)| r != m) => *anchor,
                _ => continue,
            };
            let conv = &g.nodes[anchor];
            let reads = conv.inputs.iter().filter(|&&v| v == m).count();
            if !matches!(conv.op, Op::Conv(_)) || conv.inputs.first() != Some(&m) || reads != 1 {
                continue;
            }
            fold.skip.insert(s);
            fold.at.insert(*t, (m, x, gate, s));
        }
        (!fold.skip.is_empty()).then_some(fold)
    }

    /// Whether step `s` is a folded `Mul` (it does nothing).
    pub(crate) fn skips(&self, s: usize) -> bool {
        self.skip.contains(&s)
    }

    /// For a conv step that reads a folded product: (product, `x`, `gate`).
    pub(crate) fn at(&self, s: usize) -> Option<(ValueId, ValueId, ValueId)> {
        self.at.get(&s).map(|&(m, x, g, _)| (m, x, g))
    }

    /// Folded pairs, and fallbacks so far.
    pub(crate) fn stats(&self) -> (usize, usize) {
        (self.skip.len(), self.fallbacks.load(Ordering::Relaxed))
    }

    pub(crate) fn fell_back(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves the releases of the `Mul` steps' last reads to their convs (`x` and `gate` are
    /// read there now).
    pub(crate) fn adjust_frees(&self, frees: &mut [Vec<ValueId>]) {
        for (&t, &(_, _, _, s)) in &self.at {
            let moved = std::mem::take(&mut frees[s]);
            frees[t].extend(moved);
        }
    }
}
