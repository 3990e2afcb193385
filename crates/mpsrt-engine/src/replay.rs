//! Plan replay (issue 22): a GPU session records the second run of each plan and replays it on
//! every later run, so a run costs the input copies, one loop over prepared dispatches, the
//! output copies and one submit — none of the ops' host logic (shape checks, window planning,
//! metadata, pipeline and bind-group lookups, allocations) runs again.
//!
//! - The first run of a plan runs normally (it uploads the plan's constants and compiles its
//!   pipelines, which must not be part of the recording).
//! - The second run is captured (`GpuDevice::begin_capture`): the graph inputs are first copied
//!   into the plan's own *input slots* (contiguous device tensors), the steps run on those, and
//!   the intermediates freed during the run stay with the recording (`mpsrt-runtime/replay.rs`).
//!   The graph outputs as computed there are the recording's *output values*; the caller gets
//!   copies of them. If the run cannot be replayed (a step reads GPU data on the host, or binds
//!   a buffer the plan does not hold) the plan is marked and runs normally from then on.
//! - A replay copies each feed into its slot, records the prepared commands, copies each output
//!   value into a fresh tensor and submits, all under the replay's lock, so two threads running
//!   one session see their own inputs and outputs (the GPU runs the copies and commands in the
//!   order they were recorded).
//!
//! `MPSRT_REPLAY=0` turns it off (every run takes the step-by-step path). Value inputs (graph
//! inputs whose values decide shapes) are part of the plan's key, so they are fed as given.

use crate::concat_inplace::ConcatRun;
use crate::ops::{lookup, Ctx};
use crate::session::{PlanState, Session};
use crate::value::{to_device, to_logical};
use mpsrt_core::{Error, Place, Result};
use mpsrt_graph::{Plan, ValueId};
use mpsrt_runtime::{GpuBuffer, GpuDevice, Recording, Storage};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const OP: &str = "replay";
/// Plans of one session that may hold a recording at once: each keeps its intermediate buffers.
pub(crate) const MAX_REPLAYS: usize = 4;

/// Whether plan replay is on (`MPSRT_REPLAY`, default on).
pub(crate) fn enabled_by_env() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_REPLAY").map_or(true, |v| v.trim() != "0"))
}

/// Where a plan's replay stands.
pub(crate) enum ReplayState {
    /// Runs so far (the first runs normally, the second is captured).
    Fresh(usize),
    /// Another thread is capturing this plan.
    Capturing,
    Ready(Arc<PlanReplay>),
    /// Not replayable; the reason, for `Session::replay_status`.
    Off(String),
}

/// A step run live on every replay: it reads a graph input on the host (Gather's indices), so
/// its commands depend on the input's values. Its outputs are copied into the buffers the
/// recording read them from.
struct LiveStep {
    step: usize,
    /// Index of the first recorded command after it.
    at: usize,
    /// Its outputs as captured (held: the recording reads their buffers).
    outputs: Vec<Tensor>,
}

/// A recorded plan.
pub(crate) struct PlanReplay {
    rec: Recording,
    live: Vec<LiveStep>,
    /// Per graph input: the slot its data is copied into (`None`: a value input, fed as given).
    slots: Vec<Option<Tensor>>,
    /// The graph outputs as the recording leaves them (device dtypes).
    outputs: Vec<Tensor>,
    /// Serializes replays of this recording (input copies, commands, output copies).
    lock: Mutex<()>,
}

impl PlanReplay {
    pub(crate) fn recording(&self) -> &Recording {
        &self.rec
    }
}

fn gpu_buffer(t: &Tensor) -> Option<&Arc<GpuBuffer>> {
    match t.storage() {
        Storage::Gpu(b) => Some(b),
        Storage::Cpu(_) => None,
    }
}

/// Bytes of `t`'s elements from its first one, rounded up to the 4-byte copy unit, and that
/// first byte, if `t` is a contiguous GPU tensor whose range can be copied as is.
fn copy_range(t: &Tensor) -> Option<(&Arc<GpuBuffer>, u64, u64)> {
    let b = gpu_buffer(t)?;
    let size = t.dtype().size() as u64;
    let start = t.layout().offset as u64 * size;
    let len = (t.numel() as u64 * size).next_multiple_of(4);
    (t.is_contiguous() && start.is_multiple_of(4) && start + len <= b.size().next_multiple_of(4))
        .then_some((b, start, len))
}

/// A fresh buffer with a copy of `t`'s whole storage, under the same layout (recorded now).
fn copy_storage(dev: &GpuDevice, t: &Tensor, fresh: GpuBuffer) -> Result<Tensor> {
    let Some(src) = gpu_buffer(t) else { return Ok(t.clone()) };
    dev.copy(src, 0, &fresh, 0, src.size().next_multiple_of(4))?;
    Tensor::from_storage(Storage::Gpu(Arc::new(fresh)), t.layout().clone(), t.dtype())
}

fn alloc_like(dev: &GpuDevice, t: &Tensor) -> Result<Option<GpuBuffer>> {
    gpu_buffer(t).map(|b| dev.alloc(OP, b.size())).transpose()
}

/// `t` (a feed already on the device in its device dtype) as a contiguous tensor whose bytes
/// can be copied into a slot.
fn copyable(t: Tensor) -> Result<Tensor> {
    let t = t.contiguous()?;
    if copy_range(&t).is_some() {
        return Ok(t);
    }
    // A packed view starting inside a word: a host round trip (rare; not on the hot path).
    Tensor::from_bytes(&t.to_bytes()?, t.dtype(), t.shape(), t.place())
}

impl Session {
    /// Runs `plan` through its replay when it has one, capturing it on its second run.
    /// `None`: run it step by step.
    pub(crate) fn run_replayed(
        &self,
        plan: &Arc<Plan>,
        st: &PlanState,
        bound: &[&Tensor],
    ) -> Result<Option<Vec<(String, Tensor)>>> {
        let Place::Gpu(index) = self.place() else { return Ok(None) };
        let capture = {
            let mut g = st.replay.lock().map_err(|_| poisoned())?;
            match &mut *g {
                ReplayState::Ready(r) => Some(r.clone()),
                ReplayState::Fresh(runs) if *runs >= 1 && self.replay_slots_free() => {
                    *g = ReplayState::Capturing;
                    None
                }
                ReplayState::Fresh(runs) => {
                    *runs += 1;
                    return Ok(None);
                }
                ReplayState::Capturing | ReplayState::Off(_) => return Ok(None),
            }
        };
        let dev = mpsrt_runtime::gpu_device(index)?;
        let r = match capture {
            Some(r) => r,
            None => {
                let (state, result) = match self.capture(&dev, plan, st, bound) {
                    Ok((Ok(r), outs)) => (ReplayState::Ready(Arc::new(r)), Ok(outs)),
                    Ok((Err(why), outs)) => (ReplayState::Off(why), Ok(outs)),
                    Err(e) => (ReplayState::Off(format!("the captured run failed: {e}")), Err(e)),
                };
                *st.replay.lock().map_err(|_| poisoned())? = state;
                return self.logical(plan, result?).map(Some);
            }
        };
        // Feeds to the device before taking the lock (uploads of host feeds run here).
        let mut feeds = Vec::with_capacity(r.slots.len());
        for ((slot, &v), t) in r.slots.iter().zip(&plan.graph.inputs).zip(bound) {
            if slot.is_some() {
                feeds.push(copyable(to_device(
                    "input",
                    t,
                    plan.graph.value(v).dtype,
                    self.place(),
                )?)?);
            }
        }
        let fresh: Vec<Option<GpuBuffer>> =
            r.outputs.iter().map(|t| alloc_like(&dev, t)).collect::<Result<_>>()?;
        let outs = {
            let _g = r.lock.lock().map_err(|_| poisoned())?;
            for (src, slot) in feeds.iter().zip(r.slots.iter().flatten()) {
                copy_into(&dev, src, slot)?;
            }
            let mut at = 0;
            for ls in &r.live {
                dev.replay_range(&r.rec, at..ls.at)?;
                at = ls.at;
                let ctx = Ctx { plan, place: self.place() };
                let env = HashMap::new();
                let fresh = self.run_step(&ctx, &plan.steps[ls.step], &mut |v| {
                    raw_input(plan, bound, v)
                        .map_or_else(|| self.fetch(plan, &env, Some(st), v), Ok)
                })?;
                if fresh.len() != ls.outputs.len() {
                    return Err(Error::device(OP, "a live step changed its outputs"));
                }
                for ((_, f), held) in fresh.iter().zip(&ls.outputs) {
                    copy_over(&dev, f, held)?;
                }
            }
            dev.replay_range(&r.rec, at..r.rec.commands())?;
            let mut outs = Vec::with_capacity(r.outputs.len());
            for (t, f) in r.outputs.iter().zip(fresh) {
                outs.push(match f {
                    Some(f) => copy_storage(&dev, t, f)?,
                    None => t.clone(),
                });
            }
            outs
        };
        dev.flush()?;
        self.logical(plan, outs).map(Some)
    }

    fn replay_slots_free(&self) -> bool {
        self.replays_ready() < MAX_REPLAYS
    }

    /// The graph outputs in their logical dtypes, named.
    fn logical(&self, plan: &Plan, outs: Vec<Tensor>) -> Result<Vec<(String, Tensor)>> {
        plan.graph
            .outputs
            .iter()
            .zip(outs)
            .map(|(&v, t)| {
                let info = plan.graph.value(v);
                Ok((info.name.clone(), to_logical(&t, info.dtype)?))
            })
            .collect()
    }

    /// The captured run: the outputs for this call, and the replay or why there is none.
    #[allow(clippy::type_complexity)]
    fn capture(
        &self,
        dev: &GpuDevice,
        plan: &Arc<Plan>,
        st: &PlanState,
        bound: &[&Tensor],
    ) -> Result<(std::result::Result<PlanReplay, String>, Vec<Tensor>)> {
        let value_inputs = self.value_input_indices();
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        let mut slots = Vec::with_capacity(bound.len());
        for (i, (&v, t)) in plan.graph.inputs.iter().zip(bound).enumerate() {
            if value_inputs.contains(&i) {
                env.insert(v, (*t).clone());
                slots.push(None);
                continue;
            }
            let d = copyable(to_device("input", t, plan.graph.value(v).dtype, self.place())?)?;
            let Some((_, _, len)) = copy_range(&d) else {
                return Err(Error::device(OP, "an input slot is not a GPU tensor"));
            };
            let slot = Tensor::from_storage(
                Storage::Gpu(Arc::new(dev.alloc(OP, len)?)),
                mpsrt_core::Layout::contiguous(d.shape()),
                d.dtype(),
            )?;
            copy_into(dev, &d, &slot)?;
            env.insert(v, slot.clone());
            slots.push(Some(slot));
        }
        let live = match live_steps(plan, value_inputs) {
            Ok(l) => l,
            Err(why) => {
                return Ok((Err(why), self.run_captured(dev, plan, st, env, bound, &[])?.0));
            }
        };
        dev.begin_capture()?;
        // Ends the capture if a step fails or panics, so the thread does not keep capturing.
        let guard = AbortOnDrop(dev);
        let (outputs, live) = self.run_captured(dev, plan, st, env, bound, &live)?;
        if let Some(why) = live_outputs_on_host(&live) {
            return Ok((Err(why), outputs));
        }
        // Everything the recording may touch besides its own intermediates.
        let mut keep: Vec<Arc<GpuBuffer>> = Vec::new();
        let mut add = |t: &Tensor| keep.extend(gpu_buffer(t).cloned());
        slots.iter().flatten().for_each(&mut add);
        live.iter().flat_map(|l| &l.outputs).for_each(&mut add);
        outputs.iter().for_each(&mut add);
        st.persistent.values().for_each(&mut add);
        st.constants.lock().map_err(|_| poisoned())?.values().for_each(&mut add);
        std::mem::forget(guard);
        let rec = dev.end_capture(keep);
        // The caller's copies of the outputs, recorded after the captured commands.
        let mut outs = Vec::with_capacity(outputs.len());
        for t in &outputs {
            outs.push(match alloc_like(dev, t)? {
                Some(f) if rec.is_ok() => copy_storage(dev, t, f)?,
                _ => t.clone(),
            });
        }
        let replay = rec
            .map(|rec| PlanReplay { rec, live, slots, outputs, lock: Mutex::new(()) })
            .map_err(|e| e.to_string());
        Ok((replay, outs))
    }
}

impl Session {
    /// The plan's steps on `env` (graph inputs bound), dropping values after their last use;
    /// the steps in `live` run with the capture suspended. Returns the graph outputs (device
    /// dtypes) and the live steps' outputs.
    fn run_captured(
        &self,
        dev: &GpuDevice,
        plan: &Arc<Plan>,
        st: &PlanState,
        mut env: HashMap<ValueId, Tensor>,
        bound: &[&Tensor],
        live: &[usize],
    ) -> Result<(Vec<Tensor>, Vec<LiveStep>)> {
        let ctx = Ctx { plan, place: self.place() };
        let mut held = Vec::with_capacity(live.len());
        let mut groups = ConcatRun::default();
        for s in 0..plan.steps.len() {
            let outs = if live.contains(&s) {
                // A live step's outputs are what the replay copies its fresh results over:
                // they are its own (no destination), and a part is copied into its group by
                // a recorded command after it.
                let at = dev.captured_len().unwrap_or(0);
                let env_ref = &env;
                let get = |v| {
                    raw_input(plan, bound, v)
                        .map_or_else(|| self.fetch(plan, env_ref, Some(st), v), Ok)
                };
                // No destination: the outputs are the op's own (a part is placed by a
                // recorded copy after it).
                let outs =
                    self.run_step_at(&ctx, st, s, &get, Some(&mut groups), false, Some(dev))?;
                let outputs = outs.iter().map(|(_, t)| t.clone()).collect();
                held.push(LiveStep { step: s, at, outputs });
                outs
            } else {
                let env_ref = &env;
                let get = |v| self.fetch(plan, env_ref, Some(st), v);
                self.run_step_at(&ctx, st, s, &get, Some(&mut groups), true, None)?
            };
            for (v, t) in outs {
                env.insert(v, t);
            }
            if let Some(frees) = st.frees.get(s) {
                for v in frees {
                    env.remove(v);
                }
            }
        }
        let outputs = plan
            .graph
            .outputs
            .iter()
            .map(|&v| self.fetch(plan, &env, Some(st), v))
            .collect::<Result<_>>()?;
        Ok((outputs, held))
    }
}

/// The caller's tensor for graph input `v` (as given: a live step reads it on the host).
fn raw_input(plan: &Plan, bound: &[&Tensor], v: ValueId) -> Option<Tensor> {
    let i = plan.graph.inputs.iter().position(|&x| x == v)?;
    bound.get(i).map(|t| (*t).clone())
}

/// Steps that read a graph input (other than a value input) on the host. Each may read only
/// graph inputs, constants and persistent values, so it can run alone on every replay.
fn live_steps(plan: &Plan, value_inputs: &[usize]) -> std::result::Result<Vec<usize>, String> {
    let inputs: Vec<ValueId> = plan
        .graph
        .inputs
        .iter()
        .enumerate()
        .filter(|(i, _)| !value_inputs.contains(i))
        .map(|(_, &v)| v)
        .collect();
    let mut live = Vec::new();
    for (s, step) in plan.steps.iter().enumerate() {
        let mpsrt_graph::Step::Node(n) = step else { continue };
        let Some(node) = plan.graph.nodes.get(*n) else { continue };
        let host_from = lookup(&node.op.name()).map_or(usize::MAX, |e| e.host_from);
        if !node.inputs.iter().skip(host_from).any(|v| inputs.contains(v)) {
            continue;
        }
        let stable = |v: &ValueId| {
            plan.graph.inputs.contains(v)
                || plan.graph.initializers.contains_key(v)
                || plan.storage.get(v.0) == Some(&mpsrt_graph::Storage::Persistent)
        };
        if !node.inputs.iter().all(stable) {
            return Err(format!(
                "{} reads a graph input on the host and also a computed value",
                node.op.name()
            ));
        }
        live.push(s);
    }
    Ok(live)
}

/// A live step whose output is on the host would feed later steps through uploads of this
/// run's data: not replayable.
fn live_outputs_on_host(live: &[LiveStep]) -> Option<String> {
    live.iter()
        .flat_map(|l| &l.outputs)
        .any(|t| gpu_buffer(t).is_none())
        .then(|| "a step that reads a graph input on the host produces a host value".to_string())
}

/// Records the copy of `fresh`'s storage over `held`'s (a live step's output of this run into
/// the buffer the recording reads).
fn copy_over(dev: &GpuDevice, fresh: &Tensor, held: &Tensor) -> Result<()> {
    let (Some(f), Some(h)) = (gpu_buffer(fresh), gpu_buffer(held)) else {
        return Err(Error::device(OP, "a live step's output is not on the GPU"));
    };
    if f.size() != h.size() || fresh.layout() != held.layout() {
        return Err(Error::device(OP, "a live step's output changed its layout between runs"));
    }
    dev.copy(f, 0, h, 0, f.size().next_multiple_of(4))
}

/// Aborts this thread's capture when dropped (`mem::forget` it once the capture is ended).
struct AbortOnDrop<'a>(&'a GpuDevice);

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        self.0.abort_capture();
    }
}

/// Records the copy of contiguous `src`'s bytes into `slot` (same shape and dtype).
fn copy_into(dev: &GpuDevice, src: &Tensor, slot: &Tensor) -> Result<()> {
    let (Some((s, start, len)), Some((d, dstart, dlen))) = (copy_range(src), copy_range(slot))
    else {
        return Err(Error::device(OP, "input slot copy of a tensor that is not on the GPU"));
    };
    if src.shape() != slot.shape() || src.dtype() != slot.dtype() || len != dlen {
        return Err(Error::invalid(
            OP,
            format!(
                "input {:?} {} does not fit its slot {:?} {}",
                src.shape(),
                src.dtype(),
                slot.shape(),
                slot.dtype()
            ),
        ));
    }
    dev.copy(s, start, d, dstart, len)
}

fn poisoned() -> Error {
    Error::device(OP, "replay lock poisoned by a panic in another thread")
}
