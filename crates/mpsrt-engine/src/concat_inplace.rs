//! Concat written in place by its producers (issue 22; GPU places only).
//!
//! DenseNet concatenates every earlier feature map of a dense block in every layer: run as
//! ops, layer `k`'s concat copies all `k` earlier maps again (quadratic traffic, and one
//! dispatch per layer). Here the concats that share their parts form a *group*: one buffer of
//! the largest concat's shape, planned before its first part is computed. Every part is
//! written into its slice along the concat axis exactly once, when it is produced — the
//! producing conv stores straight into the slice (`mpsrt_tensor::with_conv_destination`, the
//! implicit-GEMM kernel with an image stride), a fused elementwise kernel does where the
//! slice is dense and 256-byte aligned (`with_destination`), any other producer's result
//! (pools, Winograd and lowered convs) is copied into it
//! (`write_into`) — and every concat of the group becomes a view of its range of the buffer:
//! no concat step runs. Nested concats (`concat(concat(a, b), c)`, the incremental pattern)
//! are flattened into their parts first. At batch 1 a channel slice of NCHW is dense; at
//! batch N it is strided by the buffer's channel count, which the conv kernel and every
//! strided-input consumer take.
//!
//! Invariants (the buffers that alias): (1) a group's parts are distinct values, each in at
//! most one group, and their slices tile the buffer, so every byte is written once before any
//! view covering it is read (parts are produced before the concats that read them); (2) a
//! part that is a graph input, an initializer or a persistent value keeps its own tensor and
//! is copied into its slice when the buffer is made; a part that is a graph output is copied
//! too (callers never get a view of a group); (3) a concat that is a graph output is not
//! absorbed; (4) a producer never writes into a group buffer it reads: a step whose inputs
//! (at run time) share the group's storage computes into fresh memory and is copied, and a
//! result that itself shares that storage is copied through a fresh buffer; (5) the buffer is
//! held by the run from its first to its last step, and afterwards only by the views still
//! live (the liveness planner drops those as any value). A recording captures all of this as
//! ordinary dispatches into a buffer the capture allocated (`replay.rs` invariant 1).

use mpsrt_core::{DType, Layout, Place, Result};
use mpsrt_graph::{Op, Plan, Step, Storage, ValueId};
use mpsrt_tensor::Tensor;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `MPSRT_CONCAT_INPLACE=0` turns the rewrite off (to measure it; default on).
pub(crate) fn enabled_by_env() -> bool {
    std::env::var("MPSRT_CONCAT_INPLACE").map_or(true, |v| v.trim() != "0")
}

/// A range `[start, start + len)` along a group's concat axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: usize,
    len: usize,
}

#[derive(Debug)]
struct Group {
    shape: Vec<usize>,
    dtype: DType,
    axis: usize,
    /// Parts no step produces (graph inputs, initializers, persistent values): copied into the
    /// buffer when it is made.
    copies: Vec<(ValueId, Range)>,
}

/// A part a step produces.
#[derive(Debug, Clone, Copy)]
struct Produced {
    group: usize,
    value: ValueId,
    range: Range,
    /// The producer may write straight into the slice (not a graph output).
    direct: bool,
    /// The producer is a conv (its kernel takes the destination; every other producer offers
    /// it to its elementwise launch only, so a conv's own epilogue launches never do).
    conv: bool,
}

/// What a plan's concats become: per step, the groups to make before it, the parts it
/// produces, the concat it replaces by a view, and the groups released after it.
#[derive(Debug, Default)]
pub(crate) struct ConcatPlan {
    groups: Vec<Group>,
    make: HashMap<usize, Vec<usize>>,
    /// Per producing step: its parts and the values it reads.
    produce: HashMap<usize, (Vec<Produced>, Vec<ValueId>)>,
    views: HashMap<usize, (usize, ValueId, Range)>,
    release: HashMap<usize, Vec<usize>>,
    /// Parts written by their producers / copied into their slices, over the runs that ran
    /// the steps (a replay repeats the recorded writes without counting).
    placed: AtomicUsize,
    copied: AtomicUsize,
}

/// A concat step that may be absorbed.
struct Candidate {
    step: usize,
    out: ValueId,
    axis: usize,
    shape: Vec<usize>,
    parts: Vec<ValueId>,
}

impl ConcatPlan {
    /// The groups of `plan`'s concats (`None` when no concat can be absorbed).
    pub(crate) fn new(plan: &Plan) -> Option<ConcatPlan> {
        let g = &plan.graph;
        let outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
        let mut producer: HashMap<ValueId, usize> = HashMap::new();
        for (s, step) in plan.steps.iter().enumerate() {
            for v in plan.step_io(step).1 {
                producer.insert(v, s);
            }
        }
        let available = |v: ValueId| {
            g.inputs.contains(&v)
                || g.initializers.contains_key(&v)
                || plan.storage.get(v.0) == Some(&Storage::Persistent)
        };
        let mut cands: Vec<Candidate> = Vec::new();
        let mut by_out: HashMap<ValueId, usize> = HashMap::new();
        for (s, step) in plan.steps.iter().enumerate() {
            let Step::Node(i) = step else { continue };
            let node = &g.nodes[*i];
            let Op::Concat { axis } = node.op else { continue };
            let Some(&out) = node.outputs.first() else { continue };
            let shape = plan.shape(out);
            let rank = shape.len() as i64;
            if rank == 0 || !(-rank..rank).contains(&axis) || g.value(out).dtype != DType::F32 {
                continue;
            }
            let axis = axis.rem_euclid(rank) as usize;
            let mut parts = Vec::new();
            for &v in &node.inputs {
                match by_out.get(&v).map(|&c| &cands[c]) {
                    Some(c) if c.axis == axis => parts.extend(c.parts.iter().copied()),
                    _ => parts.push(v),
                }
            }
            let ok = parts.iter().all(|&p| {
                let ps = plan.shape(p);
                g.value(p).dtype == DType::F32
                    && ps.len() == shape.len()
                    && ps.iter().zip(&shape).enumerate().all(|(d, (a, b))| d == axis || a == b)
                    && ps.iter().all(|&x| x > 0)
                    && (producer.contains_key(&p) || available(p))
            });
            let sum: usize = parts.iter().map(|&p| plan.shape(p)[axis]).sum();
            if !ok || sum != shape[axis] {
                continue;
            }
            by_out.insert(out, cands.len());
            cands.push(Candidate { step: s, out, axis, shape, parts });
        }
        // Largest concats first: each defines a group its sub-concats become views of.
        let mut order: Vec<usize> = (0..cands.len()).collect();
        order.sort_by_key(|&c| std::cmp::Reverse(cands[c].parts.len()));
        let mut cp = ConcatPlan::default();
        let mut part_of: HashMap<ValueId, (usize, Range)> = HashMap::new();
        let mut touched: Vec<Vec<usize>> = Vec::new();
        for c in order {
            let cand = &cands[c];
            if outputs.contains(&cand.out) {
                continue;
            }
            let distinct: HashSet<ValueId> = cand.parts.iter().copied().collect();
            let fresh = distinct.len() == cand.parts.len()
                && cand.parts.iter().all(|p| !part_of.contains_key(p));
            if fresh {
                let gi = cp.groups.len();
                let mut group = Group {
                    shape: cand.shape.clone(),
                    dtype: DType::F32,
                    axis: cand.axis,
                    copies: Vec::new(),
                };
                let mut steps = vec![cand.step];
                let mut start = 0;
                for &p in &cand.parts {
                    let range = Range { start, len: plan.shape(p)[cand.axis] };
                    start += range.len;
                    part_of.insert(p, (gi, range));
                    match producer.get(&p) {
                        Some(&s) => {
                            let direct = !outputs.contains(&p);
                            let entry = cp
                                .produce
                                .entry(s)
                                .or_insert_with(|| (Vec::new(), plan.step_io(&plan.steps[s]).0));
                            let conv = match &plan.steps[s] {
                                Step::Node(j) | Step::Epilogue { anchor: j, .. } => {
                                    matches!(g.nodes[*j].op, Op::Conv(_))
                                }
                                Step::Fused(_) => false,
                            };
                            entry.0.push(Produced { group: gi, value: p, range, direct, conv });
                            steps.push(s);
                        }
                        None => group.copies.push((p, range)),
                    }
                }
                cp.groups.push(group);
                cp.views.insert(cand.step, (gi, cand.out, Range { start: 0, len: start }));
                touched.push(steps);
                continue;
            }
            // A run of consecutive parts of one group: a view of their range.
            let placed: Option<Vec<(usize, Range)>> =
                cand.parts.iter().map(|p| part_of.get(p).copied()).collect();
            let Some(placed) = placed else { continue };
            let gi = placed[0].0;
            let consecutive = placed.windows(2).all(|w| w[0].1.start + w[0].1.len == w[1].1.start);
            if placed.iter().all(|&(g, _)| g == gi) && consecutive {
                let start = placed[0].1.start;
                let len = placed.iter().map(|(_, r)| r.len).sum();
                cp.views.insert(cand.step, (gi, cand.out, Range { start, len }));
                touched[gi].push(cand.step);
            }
        }
        if cp.groups.is_empty() {
            return None;
        }
        for (gi, steps) in touched.iter().enumerate() {
            let first = steps.iter().min().copied().unwrap_or(0);
            let last = steps.iter().max().copied().unwrap_or(0);
            cp.make.entry(first).or_default().push(gi);
            cp.release.entry(last).or_default().push(gi);
        }
        Some(cp)
    }

    /// Concat steps replaced by views, parts written in place by their producers and parts
    /// copied into their slices (the last two summed over the runs that ran the steps).
    pub(crate) fn stats(&self) -> (usize, usize, usize) {
        (self.views.len(), self.placed.load(Ordering::Relaxed), self.copied.load(Ordering::Relaxed))
    }

    /// The view of `range` of group `gi`'s buffer.
    fn view(&self, gi: usize, buf: &Tensor, range: Range) -> Result<Tensor> {
        let axis = self.groups[gi].axis as isize;
        let (lo, hi) = (range.start as isize, (range.start + range.len) as isize);
        let v = buf.slice(axis, Some(lo), Some(hi), 1)?;
        // Dense apart from the strides of size-1 dims (every slice at batch 1): canonical
        // strides, so consumers see a contiguous tensor (their fast paths, no copies).
        let canon = mpsrt_core::contiguous_strides(v.shape());
        let dense = v
            .shape()
            .iter()
            .zip(v.strides().iter().zip(&canon))
            .all(|(&d, (a, b))| d == 1 || a == b);
        if !dense || v.strides() == canon.as_slice() {
            return Ok(v);
        }
        let layout =
            Layout { shape: v.shape().to_vec(), strides: canon, offset: v.layout().offset };
        Tensor::from_storage(v.storage().clone(), layout, v.dtype())
    }

    /// Step `s` of a run: makes the groups it starts, runs it through `exec` (with a
    /// destination for the parts it produces when `direct` allows), places its parts, replaces
    /// an absorbed concat by its view, and releases the groups it ends.
    pub(crate) fn run_step(
        &self,
        s: usize,
        bufs: &mut ConcatRun,
        place: Place,
        get: &dyn Fn(ValueId) -> Result<Tensor>,
        direct: bool,
        exec: &mut dyn FnMut() -> Result<Vec<(ValueId, Tensor)>>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        for &gi in self.make.get(&s).into_iter().flatten() {
            let group = &self.groups[gi];
            let buf = mpsrt_tensor::empty(&group.shape, group.dtype, place)?;
            for &(v, range) in &group.copies {
                write_part(&self.view(gi, &buf, range)?, &get(v)?)?;
                self.copied.fetch_add(1, Ordering::Relaxed);
            }
            bufs.bufs.insert(gi, buf);
        }
        let outs = if let Some(&(gi, out, range)) = self.views.get(&s) {
            vec![(out, self.view(gi, self.buf(bufs, gi)?, range)?)]
        } else if let Some((parts, step_inputs)) = self.produce.get(&s) {
            // One destination per step: the first part a single-output producer writes.
            let mut dest = None;
            if direct && parts.len() == 1 && parts[0].direct {
                let p = parts[0];
                let buf = self.buf(bufs, p.group)?;
                let mut reads_group = false;
                for &v in step_inputs.iter() {
                    reads_group |= shares(&get(v)?, buf);
                }
                if !reads_group {
                    dest = Some(self.view(p.group, buf, p.range)?);
                }
            }
            let mut outs = match &dest {
                Some(d) if parts[0].conv => mpsrt_tensor::with_conv_destination(d, &mut *exec)?,
                Some(d) => mpsrt_tensor::with_destination(d, &mut *exec)?,
                None => exec()?,
            };
            for p in parts {
                let Some(slot) = outs.iter_mut().find(|(v, _)| *v == p.value) else { continue };
                let view = self.view(p.group, self.buf(bufs, p.group)?, p.range)?;
                if same_memory(&slot.1, &view) {
                    slot.1 = view; // written in place
                    self.placed.fetch_add(1, Ordering::Relaxed);
                } else {
                    write_part(&view, &slot.1)?;
                    self.copied.fetch_add(1, Ordering::Relaxed);
                }
            }
            outs
        } else {
            exec()?
        };
        for gi in self.release.get(&s).into_iter().flatten() {
            bufs.bufs.remove(gi);
        }
        Ok(outs)
    }

    fn buf<'a>(&self, bufs: &'a ConcatRun, gi: usize) -> Result<&'a Tensor> {
        bufs.bufs.get(&gi).ok_or_else(|| {
            mpsrt_core::Error::device(
                "concat",
                "internal: a concat group is used before it is made",
            )
        })
    }
}

/// The group buffers of one run.
#[derive(Default)]
pub(crate) struct ConcatRun {
    bufs: HashMap<usize, Tensor>,
}

/// Whether `t` lives in `buf`'s storage.
fn shares(t: &Tensor, buf: &Tensor) -> bool {
    match (t.storage(), buf.storage()) {
        (mpsrt_runtime::Storage::Gpu(a), mpsrt_runtime::Storage::Gpu(b)) => {
            std::sync::Arc::ptr_eq(a, b)
        }
        _ => false,
    }
}

/// Whether `t` is exactly `view` (same storage, offset, shape and strides).
fn same_memory(t: &Tensor, view: &Tensor) -> bool {
    shares(t, view) && layouts_equal(t.layout(), view.layout()) && t.dtype() == view.dtype()
}

fn layouts_equal(a: &Layout, b: &Layout) -> bool {
    a.offset == b.offset && a.shape == b.shape && a.strides == b.strides
}

/// Copies `src` into the slice `view`; a source inside the same buffer (a view op's output)
/// goes through a fresh copy first (a dispatch cannot read and write one buffer).
fn write_part(view: &Tensor, src: &Tensor) -> Result<()> {
    if shares(src, view) {
        let fresh = mpsrt_tensor::concat(&[src], 0)?;
        return mpsrt_tensor::write_into(view, &fresh);
    }
    mpsrt_tensor::write_into(view, src)
}
