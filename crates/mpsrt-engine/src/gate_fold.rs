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
//!
//! The gate itself — two 1×1 convs with biases and activations on the pooled `[N, C, 1, 1]`
//! vector, the first read only by the second — runs as one dispatch
//! (`mpsrt_tensor::se_gate`: one workgroup per image) instead of 2–4: the first conv's step
//! does nothing and the second computes both. Its sums run in another order than the GEMM's,
//! so the gate matches the unfused plan to float rounding (`MPSRT_SE_FUSE=0` turns this part
//! off; C ≤ 2048 and C4 ≤ 256, else the convs run as steps).

use mpsrt_core::DType;
use mpsrt_graph::{BinaryOp, Op, Plan, Step, UnaryOp, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which folds `MPSRT_GATE_FOLD` asks for: `(gate Muls, BN-ReLUs)`. Unset: the gate `Mul`
/// fold only — with the depthwise pool (`dw_pool.rs`) and the GEMV SE convs it measured
/// EfficientNet-B0 batch 1 at 0.98 ms in three fresh processes against 1.01–1.06 without it
/// (H200, 2026-11-26; alone it was within the H200's ±0.1 ms run-to-run noise in earlier
/// calls). `1`: the BN-ReLU fold as well (opt-in: DenseNet-121 measured level with it, batch
/// 32 perhaps slower). `0`: neither.
pub(crate) fn enabled_by_env() -> (bool, bool) {
    match std::env::var("MPSRT_GATE_FOLD").as_deref().map(str::trim) {
        Ok("0") => (false, false),
        Ok("1") => (true, true),
        _ => (true, false),
    }
}

/// `MPSRT_SE_FUSE=1` runs the gate's two convs as one dispatch (with the folds on; default
/// off: one workgroup per image is far too little of a large GPU — 130 µs per gate on an
/// H200 for EfficientNet's 1152-channel blocks, against a few µs for the two convs).
fn se_fuse_by_env() -> bool {
    std::env::var("MPSRT_SE_FUSE").is_ok_and(|v| v.trim() == "1")
}

/// What a folded step applied to the conv's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputFold {
    /// `x · gate` (`[N, C, 1, 1]`).
    Gate(ValueId),
    /// `max(x · scale + shift, 0)` (a constant-parameter BatchNorm + Relu, one fused step).
    AffineRelu(ValueId, ValueId),
}

/// A step folded into the conv step reading its output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Folded {
    /// The folded step's output (the conv's input), its input `x`, and what it applied.
    pub m: ValueId,
    pub x: ValueId,
    pub op: InputFold,
    /// The folded step (run after all if no conv kernel takes the operation).
    pub step: usize,
}

/// A squeeze-excitation gate's two 1×1 convs run as one dispatch at the second's step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SePair {
    /// The first conv's step (does nothing) and the pooled input it reads.
    pub first: usize,
    pub x: ValueId,
    /// Weights, biases and activation nodes of the two convs.
    pub w1: ValueId,
    pub b1: ValueId,
    pub act1: Option<usize>,
    pub w2: ValueId,
    pub b2: ValueId,
    pub act2: Option<usize>,
    /// The second step's output.
    pub out: ValueId,
}

/// The folded pairs of a plan.
#[derive(Debug, Default)]
pub(crate) struct GateFold {
    /// `Mul` steps that do nothing.
    skip: HashSet<usize>,
    /// Conv step → (the product it reads, `x`, `gate`), and the `Mul` step it replaces.
    at: HashMap<usize, Folded>,
    /// Runs of a folded conv that no GPU conv kernel took the gate in (the product was
    /// computed after all).
    fallbacks: AtomicUsize,
    /// Second conv step → its fused pair.
    se: HashMap<usize, SePair>,
}

impl GateFold {
    /// The folds of `plan`: gate `Mul`s, and with `affine` BN-ReLU steps.
    pub(crate) fn new(plan: &Plan, affine: bool) -> Option<GateFold> {
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
            if let Some(t) = sole_conv_reader(plan, &readers, m) {
                fold.skip.insert(s);
                fold.at.insert(t, Folded { m, x, op: InputFold::Gate(gate), step: s });
            }
        }
        if affine {
            fold.find_affine_relus(plan, &readers);
        }
        if se_fuse_by_env() {
            fold.find_se_pairs(plan, &readers);
        }
        (!fold.skip.is_empty()).then_some(fold)
    }

    /// Fused steps that are exactly `Relu(x · scale + shift)` with constant `C`-value scale
    /// and shift (a BatchNorm + Relu: DenseNet's pre-activation of each concat) read only by a
    /// conv's input.
    fn find_affine_relus(&mut self, plan: &Plan, readers: &HashMap<ValueId, Vec<usize>>) {
        let g = &plan.graph;
        for (s, step) in plan.steps.iter().enumerate() {
            let Step::Fused(f) = step else { continue };
            let [mul, add, relu] = f.nodes.as_slice() else { continue };
            let (mul, add, relu) = (&g.nodes[*mul], &g.nodes[*add], &g.nodes[*relu]);
            if mul.op != Op::Binary(BinaryOp::Mul)
                || add.op != Op::Binary(BinaryOp::Add)
                || relu.op != Op::Unary(UnaryOp::Relu)
                || mul.inputs.len() != 2
                || add.inputs.len() != 2
                || relu.outputs.first() != Some(&f.output)
                || relu.inputs.first() != add.outputs.first()
            {
                continue;
            }
            let u = f.output;
            let o = plan.shape(u);
            if o.len() != 4 || g.outputs.contains(&u) || g.value(u).dtype != DType::F32 {
                continue;
            }
            // A per-channel constant: C values shaped to broadcast over the channel axis.
            let per_channel = |v: ValueId| {
                let sh = plan.shape(v);
                g.initializers.get(&v).is_some_and(|h| h.dtype == DType::F32)
                    && (sh == [o[1], 1, 1] || sh == [1, o[1], 1, 1])
            };
            let Some(&mid) = mul.outputs.first() else { continue };
            let (x, scale) = match (mul.inputs[0], mul.inputs[1]) {
                (a, b) if per_channel(b) && plan.shape(a) == o => (a, b),
                (a, b) if per_channel(a) && plan.shape(b) == o => (b, a),
                _ => continue,
            };
            let shift = match (add.inputs[0], add.inputs[1]) {
                (a, b) if a == mid && per_channel(b) => b,
                (a, b) if b == mid && per_channel(a) => a,
                _ => continue,
            };
            if g.value(x).dtype != DType::F32 {
                continue;
            }
            if let Some(t) = sole_conv_reader(plan, readers, u) {
                if self.at.contains_key(&t) {
                    continue;
                }
                self.skip.insert(s);
                let op = InputFold::AffineRelu(scale, shift);
                self.at.insert(t, Folded { m: u, x, op, step: s });
            }
        }
    }

    /// Pairs of 1×1 convs with constant weights and biases on a `[N, C, 1, 1]` vector, the
    /// first's output read only by the second (`SePair`).
    fn find_se_pairs(&mut self, plan: &Plan, readers: &HashMap<ValueId, Vec<usize>>) {
        let g = &plan.graph;
        // (conv node, activation node) of a step that is a plain conv or conv + activation.
        let conv_of = |step: &Step| -> Option<(usize, Option<usize>)> {
            let (anchor, act) = match step {
                Step::Node(j) => (*j, None),
                Step::Epilogue { anchor, bias: None, add: None, activation } => {
                    (*anchor, *activation)
                }
                _ => return None,
            };
            let node = &g.nodes[anchor];
            let Op::Conv(a) = &node.op else { return None };
            let ok = node.inputs.len() == 3
                && a.group == 1
                && a.pads.iter().all(|&p| p == 0)
                && a.dilations.iter().all(|&d| d == 1)
                && node.inputs[1..].iter().all(|v| g.initializers.contains_key(v));
            ok.then_some((anchor, act))
        };
        for (s1, step) in plan.steps.iter().enumerate() {
            if self.skip.contains(&s1) || self.at.contains_key(&s1) {
                continue;
            }
            let Some((c1, act1)) = conv_of(step) else { continue };
            let outs = plan.step_io(step).1;
            let [q] = outs.as_slice() else { continue };
            let x = g.nodes[c1].inputs[0];
            let (xs, ws) = (plan.shape(x), plan.shape(g.nodes[c1].inputs[1]));
            let ([n, c, 1, 1], [c4, cw, 1, 1]) = (xs.as_slice(), ws.as_slice()) else {
                continue;
            };
            if cw != c || g.outputs.contains(q) || g.value(x).dtype != DType::F32 {
                continue;
            }
            let Some([s2]) = readers.get(q).map(Vec::as_slice) else { continue };
            if self.skip.contains(s2) || self.at.contains_key(s2) || self.se.contains_key(s2) {
                continue;
            }
            let Some((c2, act2)) = conv_of(&plan.steps[*s2]) else { continue };
            let conv2 = &g.nodes[c2];
            let w2s = plan.shape(conv2.inputs[1]);
            let outs2 = plan.step_io(&plan.steps[*s2]).1;
            let [out] = outs2.as_slice() else { continue };
            if conv2.inputs[0] != *q || w2s != [*c, *c4, 1, 1] || plan.shape(*out) != [*n, *c, 1, 1]
            {
                continue;
            }
            self.skip.insert(s1);
            self.se.insert(
                *s2,
                SePair {
                    first: s1,
                    x,
                    w1: g.nodes[c1].inputs[1],
                    b1: g.nodes[c1].inputs[2],
                    act1,
                    w2: conv2.inputs[1],
                    b2: conv2.inputs[2],
                    act2,
                    out: *out,
                },
            );
        }
    }

    /// Whether this fold changes step `s` (skips it, or runs it with a fold).
    pub(crate) fn touches(&self, s: usize) -> bool {
        self.skip.contains(&s) || self.at.contains_key(&s) || self.se.contains_key(&s)
    }

    /// The fused gate computed at step `s`, if any.
    pub(crate) fn se_at(&self, s: usize) -> Option<SePair> {
        self.se.get(&s).copied()
    }

    /// Whether step `s` is a folded `Mul` (it does nothing).
    pub(crate) fn skips(&self, s: usize) -> bool {
        self.skip.contains(&s)
    }

    /// For a conv step that reads a folded step's output: what was folded.
    pub(crate) fn at(&self, s: usize) -> Option<Folded> {
        self.at.get(&s).copied()
    }

    /// Folded gate `Mul`s, folded BatchNorm + Relu steps, fused SE gates, and fallbacks so
    /// far.
    pub(crate) fn stats(&self) -> (usize, usize, usize, usize) {
        let gates = self.at.values().filter(|f| matches!(f.op, InputFold::Gate(_))).count();
        let affine = self.at.len() - gates;
        (gates, affine, self.se.len(), self.fallbacks.load(Ordering::Relaxed))
    }

    pub(crate) fn fell_back(&self) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves the releases of the `Mul` steps' last reads to their convs (`x` and `gate` are
    /// read there now).
    pub(crate) fn adjust_frees(&self, frees: &mut [Vec<ValueId>]) {
        let pairs = self.at.iter().map(|(&t, f)| (f.step, t));
        for (s, t) in pairs.chain(self.se.iter().map(|(&t, p)| (p.first, t))) {
            let moved = std::mem::take(&mut frees[s]);
            frees[t].extend(moved);
        }
    }
}

/// The one step reading `m`, when it reads it once, as the input of a conv (a plain conv step,
/// or an epilogue whose residual is not `m`).
fn sole_conv_reader(
    plan: &Plan,
    readers: &HashMap<ValueId, Vec<usize>>,
    m: ValueId,
) -> Option<usize> {
    let g = &plan.graph;
    let [t] = readers.get(&m).map(Vec::as_slice)? else { return None };
    let anchor = match &plan.steps[*t] {
        Step::Node(j) => *j,
        Step::Epilogue { anchor, add, .. } if add.is_none_or(|(_, r)| r != m) => *anchor,
        _ => return None,
    };
    let conv = &g.nodes[anchor];
    let reads = conv.inputs.iter().filter(|&&v| v == m).count();
    (matches!(conv.op, Op::Conv(_)) && conv.inputs.first() == Some(&m) && reads == 1).then_some(*t)
}
