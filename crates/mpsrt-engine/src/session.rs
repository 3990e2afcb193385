//! `Session`: loads an ONNX model once, specializes it per concrete input shapes through the plan
//! cache, runs each plan's init steps once (persistent values) and then its steps on every call,
//! dropping every intermediate right after its last use so the caching allocator recycles it.

use crate::concat_inplace::{ConcatPlan, ConcatRun};
use crate::elementwise::run_fused;
use crate::gate_fold::GateFold;
use crate::ops::{lookup, Ctx};
use crate::replay::ReplayState;
use crate::value::{host_to_tensor, to_device, to_logical};
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_graph::{
    shape_str, CompiledGraph, Declared, Dim, HostTensor, Node, Plan, PlanOptions, Signature, Step,
    Storage, ValueId,
};
use mpsrt_tensor::Tensor;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex};

const OP: &str = "session";
/// Plans whose per-plan state (persistent values, liveness) is kept.
const STATE_CAPACITY: usize = 16;

/// Engine knobs; both on by default (off exists to measure what each buys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOptions {
    /// Fuse elementwise chains into one generated kernel each.
    pub fusion: bool,
    /// Reuse intermediate buffers by liveness (drop values after their last use).
    pub memory_planning: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { fusion: true, memory_planning: true }
    }
}

/// A graph input or output: name, dtype and shape (`Dim::Sym` for dynamic dims), and what the
/// model declares for it.
#[derive(Debug, Clone, PartialEq)]
pub struct IoInfo {
    pub name: String,
    /// The dtype feeds must have and results come in.
    pub dtype: DType,
    /// An input's declared shape (unnamed dynamic dims named `"<input>:<axis>"`) or an output's
    /// inferred one; empty for scalars and for outputs whose rank inference leaves unknown.
    pub shape: Vec<Dim>,
    /// The declared element type (before widening: `uint16` stored as `int32`) and shape
    /// (before inference; `None` when the model gives none); empty for graphs built by hand.
    pub declared: Declared,
}

impl IoInfo {
    /// The shape with dynamic dims as `-1` (Triton/ORT style).
    pub fn dims_i64(&self) -> Vec<i64> {
        self.shape.iter().map(|d| d.known().map_or(-1, |n| n as i64)).collect()
    }
}

/// Per-plan state kept across runs.
pub(crate) struct PlanState {
    plan: Arc<Plan>,
    pub(crate) persistent: HashMap<ValueId, Tensor>,
    /// For each step, the values whose last use it is (dropped after the step).
    pub(crate) frees: Vec<Vec<ValueId>>,
    /// Device copies of the initializers this plan has read, so a run never re-hashes
    /// constant bytes (ResNet-50 holds 100 MB of them); the tensors are shared with
    /// `Session::constants`, not duplicated.
    pub(crate) constants: Mutex<HashMap<ValueId, Tensor>>,
    /// The plan's recording (GPU sessions; `replay.rs`).
    pub(crate) replay: Mutex<ReplayState>,
    /// Concats written in place by their producers (`concat_inplace.rs`), GPU places only.
    pub(crate) concat: Option<ConcatPlan>,
    /// Gate `Mul`s folded into the convs that read them (`gate_fold.rs`), GPU places only.
    pub(crate) gates: Option<GateFold>,
    /// Depthwise convs computing their pool too (`dw_pool.rs`), GPU places only.
    pub(crate) dw_pools: Option<crate::dw_pool::DwPools>,
}

/// Host-side wall time of one step in [`Session::profile`] (the device is synchronized after
/// each step, so it includes the step's GPU time and one submit round trip).
#[derive(Debug, Clone)]
pub struct StepProfile {
    /// `Fused` or the ONNX op type.
    pub op: String,
    /// Node name (or the fused group's output) for locating the step.
    pub name: String,
    pub ms: f64,
    /// Host time recording the step (before the synchronization), mean over the repeats.
    pub host_ms: f64,
    /// The step's GPU time from timestamp queries (`None` where the adapter has none: `ms`,
    /// synchronized per step, is then the only measure).
    pub gpu_ms: Option<f64>,
}

type ConstKey = (String, DType, Vec<usize>, u64);

/// A loaded model ready to run on one place.
pub struct Session {
    compiled: CompiledGraph,
    place: Place,
    options: SessionOptions,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    states: Mutex<Vec<Arc<PlanState>>>,
    constants: Mutex<HashMap<ConstKey, Tensor>>,
    /// Replay recorded plans (`replay.rs`; `MPSRT_REPLAY=0` or [`Session::with_replay`] off).
    replay: bool,
    /// Write concats in place on GPU places (`concat_inplace.rs`; `MPSRT_CONCAT_INPLACE=0` or
    /// [`Session::with_concat_inplace`] off).
    concat_inplace: bool,
    /// Fold squeeze-excitation's gate `Mul` and BN-ReLU steps into the conv reading them on
    /// GPU places (`gate_fold.rs`; `MPSRT_GATE_FOLD` or [`Session::with_gate_fold`]): the
    /// gate `Mul` fold (default on) and the BN-ReLU fold (default off).
    gate_fold: (bool, bool),
    /// Depthwise conv + its pool in one dispatch on GPUs (`dw_pool.rs`, `MPSRT_DW_POOL`).
    dw_pool: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("place", &self.place)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

fn io(sig: Vec<Signature>) -> Vec<IoInfo> {
    sig.into_iter()
        .map(|s| IoInfo {
            name: s.name,
            dtype: s.dtype,
            shape: s.shape.unwrap_or_default(),
            declared: s.declared,
        })
        .collect()
}

impl Session {
    /// Loads a model file.
    pub fn load(path: impl AsRef<Path>, place: Place, options: SessionOptions) -> Result<Session> {
        let model = mpsrt_onnx::load_path(path)?;
        Self::from_graph(model.graph, place, options)
    }

    /// Loads a model from memory.
    pub fn load_bytes(bytes: &[u8], place: Place, options: SessionOptions) -> Result<Session> {
        let model = mpsrt_onnx::load_bytes(bytes)?;
        Self::from_graph(model.graph, place, options)
    }

    /// Compiles an already imported graph. Fails listing every op the engine cannot run.
    pub fn from_graph(
        graph: mpsrt_graph::Graph,
        place: Place,
        options: SessionOptions,
    ) -> Result<Session> {
        let place = mpsrt_runtime::validate_place(place)?;
        graph.check_ops("engine", |op| lookup(&op.name()).is_some())?;
        let plan_opts = PlanOptions {
            fuse_elementwise: options.fusion,
            reuse_memory: options.memory_planning,
            fold_batchnorm: true,
            fuse_epilogues: options.fusion,
        };
        let compiled = CompiledGraph::new(graph, plan_opts)?;
        // Folding may leave ops the importer produced in other forms: check again.
        compiled.graph().check_ops("engine", |op| lookup(&op.name()).is_some())?;
        let inputs = io(compiled.graph().input_signature());
        let outputs = io(compiled.graph().output_signature());
        Ok(Session {
            compiled,
            place,
            options,
            inputs,
            outputs,
            states: Mutex::new(Vec::new()),
            constants: Mutex::new(HashMap::new()),
            replay: crate::replay::enabled_by_env(),
            concat_inplace: crate::concat_inplace::enabled_by_env(),
            gate_fold: crate::gate_fold::enabled_by_env(),
            dw_pool: crate::dw_pool::enabled_by_env(),
        })
    }

    /// Turns the depthwise conv + pool fusion (`dw_pool.rs`) on or off; plans run keep theirs.
    pub fn with_dw_pool(mut self, on: bool) -> Session {
        self.dw_pool = on;
        self
    }

    /// For these input shapes' plan: depthwise convs computing their pool too, and runs in
    /// which one ran as two steps after all (zeros before the first run, on the CPU, or off).
    pub fn dw_pools(&self, shapes: &[Vec<usize>]) -> Result<(usize, usize)> {
        let plan = self.compiled.plan(shapes)?;
        let states = self.states.lock().map_err(|_| poisoned())?;
        let st = states.iter().find(|s| Arc::ptr_eq(&s.plan, &plan));
        Ok(st.and_then(|s| s.dw_pools.as_ref()).map_or((0, 0), |d| d.stats()))
    }

    /// Turns the folds of `gate_fold.rs` — squeeze-excitation's gate `Mul` and constant
    /// BN-ReLU steps into the conv that reads them — both on or both off for this session (by
    /// default the `Mul` fold only, see `MPSRT_GATE_FOLD`; GPU places only). Plans already run
    /// keep their choice.
    pub fn with_gate_fold(mut self, on: bool) -> Session {
        self.gate_fold = (on, on);
        self
    }

    /// For the plan of these input shapes: gate `Mul` steps folded into their convs,
    /// BatchNorm-and-Relu steps folded into their convs, squeeze-excitation gates whose two
    /// convs run as one dispatch, and the runs so far in which a folded conv ran the folded
    /// step after all (no conv took the operation).
    /// Zeros before the plan's first run, on the CPU, or with the fold off.
    pub fn gate_folds(&self, shapes: &[Vec<usize>]) -> Result<(usize, usize, usize, usize)> {
        let plan = self.compiled.plan(shapes)?;
        let states = self.states.lock().map_err(|_| poisoned())?;
        let st = states.iter().find(|s| Arc::ptr_eq(&s.plan, &plan));
        Ok(st.and_then(|s| s.gates.as_ref()).map_or((0, 0, 0, 0), |g| g.stats()))
    }

    /// Turns the concat written in place by its producers on or off for this session (on by
    /// default unless `MPSRT_CONCAT_INPLACE=0`; GPU places only — CPU buffers are immutable,
    /// so a CPU session runs every concat as an op). Plans already run keep their choice.
    pub fn with_concat_inplace(mut self, on: bool) -> Session {
        self.concat_inplace = on;
        self
    }

    /// For the plan of these input shapes: its concat steps that run as views of a buffer
    /// their producers wrote, and over the runs so far that ran its steps (not replays) the
    /// parts its producers wrote in place and the parts copied into their slices. Zeros
    /// before the plan's first run, on the CPU, or with the rewrite off.
    pub fn concat_stats(&self, shapes: &[Vec<usize>]) -> Result<(usize, usize, usize)> {
        let plan = self.compiled.plan(shapes)?;
        let states = self.states.lock().map_err(|_| poisoned())?;
        let st = states.iter().find(|s| Arc::ptr_eq(&s.plan, &plan));
        Ok(st.and_then(|s| s.concat.as_ref()).map_or((0, 0, 0), |c| c.stats()))
    }

    /// Turns plan replay on or off for this session (on by default on GPU places unless
    /// `MPSRT_REPLAY=0`): with it on, the second run of each plan is recorded and later runs
    /// replay the recorded commands instead of running each step's host logic.
    pub fn with_replay(mut self, on: bool) -> Session {
        self.replay = on;
        self
    }

    /// Whether the plan for these input shapes is replayed: `"ready: ..."` with the recording's
    /// size, `"off: <why>"`, `"not recorded yet"`, or `"no plan state"` before its first run.
    pub fn replay_status(&self, shapes: &[Vec<usize>]) -> Result<String> {
        let plan = self.compiled.plan(shapes)?;
        // The states lock is released before a replay lock is taken (a capturing run holds its
        // replay lock while it counts the other plans' recordings under the states lock).
        let st = {
            let states = self.states.lock().map_err(|_| poisoned())?;
            states.iter().find(|s| Arc::ptr_eq(&s.plan, &plan)).cloned()
        };
        let Some(st) = st else { return Ok("no plan state".into()) };
        let g = st.replay.lock().map_err(|_| poisoned())?;
        Ok(match &*g {
            ReplayState::Ready(r) => {
                let rec = r.recording();
                format!(
                    "ready: {} dispatches, {} commands, {} bytes of intermediates, path {}",
                    rec.dispatches(),
                    rec.commands(),
                    rec.owned_bytes(),
                    rec.replay_path()
                )
            }
            ReplayState::Off(why) => format!("off: {why}"),
            ReplayState::Fresh(_) | ReplayState::Capturing => "not recorded yet".into(),
        })
    }

    /// Plans of this session holding a recording (a plan being updated is not counted).
    pub(crate) fn replays_ready(&self) -> usize {
        let Ok(states) = self.states.lock() else { return usize::MAX };
        states
            .iter()
            .filter(|s| s.replay.try_lock().is_ok_and(|g| matches!(*g, ReplayState::Ready(_))))
            .count()
    }

    pub(crate) fn value_input_indices(&self) -> &[usize] {
        self.compiled.value_inputs()
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }
    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }
    pub fn place(&self) -> Place {
        self.place
    }
    pub fn options(&self) -> SessionOptions {
        self.options
    }

    /// The plan for these input shapes (graph input order), e.g. for `Plan::summary`.
    pub fn plan_for(&self, shapes: &[Vec<usize>]) -> Result<Arc<Plan>> {
        self.compiled.plan(shapes)
    }

    /// Checks names, dtypes and shapes; returns the inputs in graph order.
    fn bind<'a>(&self, feeds: &'a HashMap<String, Tensor>) -> Result<Vec<&'a Tensor>> {
        let expected: Vec<&str> = self.inputs.iter().map(|i| i.name.as_str()).collect();
        if let Some(unknown) = feeds.keys().find(|k| !expected.contains(&k.as_str())) {
            return Err(Error::invalid(
                OP,
                format!("unknown input {unknown:?}; the model's inputs are {expected:?}"),
            ));
        }
        let mut out = Vec::with_capacity(self.inputs.len());
        for info in &self.inputs {
            let t = feeds.get(&info.name).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "missing input {:?} ({} {}); the model's inputs are {expected:?}",
                        info.name,
                        info.dtype,
                        shape_str(&info.shape)
                    ),
                )
            })?;
            if t.dtype() != info.dtype {
                return Err(Error::dtype(
                    OP,
                    format!(
                        "input {:?}: expected dtype {}, given {}",
                        info.name,
                        info.dtype,
                        t.dtype()
                    ),
                ));
            }
            let ok = t.ndim() == info.shape.len()
                && info.shape.iter().zip(t.shape()).all(|(d, &n)| d.known().is_none_or(|k| k == n));
            if !ok {
                return Err(Error::shape(
                    OP,
                    format!(
                        "input {:?}: expected shape {}, given {:?}",
                        info.name,
                        shape_str(&info.shape),
                        t.shape()
                    ),
                ));
            }
            out.push(t);
        }
        Ok(out)
    }

    fn plan(&self, feeds: &[&Tensor]) -> Result<Arc<Plan>> {
        let shapes: Vec<Vec<usize>> = feeds.iter().map(|t| t.shape().to_vec()).collect();
        let vi = self.compiled.value_inputs();
        if vi.is_empty() {
            return self.compiled.plan(&shapes);
        }
        let mut values = Vec::with_capacity(vi.len());
        for &i in vi {
            let t = feeds.get(i).ok_or_else(|| Error::invalid(OP, "value input out of range"))?;
            values.push(HostTensor::new(t.dtype(), t.shape().to_vec(), t.to_bytes()?)?);
        }
        self.compiled.plan_with_values(&shapes, &values)
    }

    fn constant(&self, plan: &Plan, v: ValueId) -> Result<Tensor> {
        let h = plan.graph.initializers.get(&v).ok_or_else(|| {
            Error::invalid(OP, format!("constant {:?} has no data", plan.graph.value(v).name))
        })?;
        let mut hasher = DefaultHasher::new();
        h.bytes.hash(&mut hasher);
        let key = (plan.graph.value(v).name.clone(), h.dtype, h.shape.clone(), hasher.finish());
        let mut cache = self.constants.lock().map_err(|_| poisoned())?;
        if let Some(t) = cache.get(&key) {
            return Ok(t.clone());
        }
        // int64 constants that do not fit int32 (Slice ends) stay on the CPU side.
        let t = match host_to_tensor(&plan.graph.value(v).name, h, self.place) {
            Ok(t) => t,
            Err(_) if h.dtype == DType::I64 => host_to_tensor("constant", h, Place::Cpu)?,
            Err(e) => return Err(e),
        };
        cache.insert(key, t.clone());
        Ok(t)
    }

    fn state(&self, plan: &Arc<Plan>) -> Result<Arc<PlanState>> {
        {
            let states = self.states.lock().map_err(|_| poisoned())?;
            if let Some(s) = states.iter().find(|s| Arc::ptr_eq(&s.plan, plan)) {
                return Ok(s.clone());
            }
        }
        check_value_sizes(plan, self.place)?;
        let ctx = Ctx { plan, place: self.place };
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        for step in &plan.init_steps {
            let outs = self.run_step(&ctx, step, &mut |v| self.fetch(plan, &env, None, v))?;
            for (v, t) in outs {
                env.insert(v, t);
            }
        }
        let persistent: HashMap<ValueId, Tensor> = env
            .into_iter()
            .filter(|(v, _)| plan.storage.get(v.0) == Some(&Storage::Persistent))
            .collect();
        let mut frees = liveness(plan, self.options.memory_planning);
        let concat =
            if self.place.is_gpu() && self.concat_inplace { ConcatPlan::new(plan) } else { None };
        let gates = match self.gate_fold {
            (true, affine) if self.place.is_gpu() => GateFold::new(plan, affine),
            _ => None,
        };
        if let Some(g) = &gates {
            g.adjust_frees(&mut frees);
        }
        let dw_pools = if self.place.is_gpu() && self.dw_pool {
            crate::dw_pool::DwPools::new(plan, &|s| gates.as_ref().is_some_and(|g| g.touches(s)))
        } else {
            None
        };
        let st = Arc::new(PlanState {
            concat,
            gates,
            dw_pools,
            plan: plan.clone(),
            persistent,
            frees,
            constants: Mutex::new(HashMap::new()),
            replay: Mutex::new(ReplayState::Fresh(0)),
        });
        let mut states = self.states.lock().map_err(|_| poisoned())?;
        if states.len() >= STATE_CAPACITY {
            states.remove(0);
        }
        states.push(st.clone());
        Ok(st)
    }

    /// A value that is not produced by the current run's steps: constant, persistent or computed
    /// earlier in the run.
    pub(crate) fn fetch(
        &self,
        plan: &Plan,
        env: &HashMap<ValueId, Tensor>,
        st: Option<&PlanState>,
        v: ValueId,
    ) -> Result<Tensor> {
        if let Some(t) = env.get(&v).or_else(|| st.and_then(|s| s.persistent.get(&v))) {
            return Ok(t.clone());
        }
        if plan.graph.initializers.contains_key(&v) {
            let Some(st) = st else { return self.constant(plan, v) };
            let mut consts = st.constants.lock().map_err(|_| poisoned())?;
            if let Some(t) = consts.get(&v) {
                return Ok(t.clone());
            }
            let t = self.constant(plan, v)?;
            consts.insert(v, t.clone());
            return Ok(t);
        }
        Err(Error::invalid(
            OP,
            format!("value {:?} is read before it is computed", plan.graph.value(v).name),
        ))
    }

    pub(crate) fn run_step(
        &self,
        ctx: &Ctx<'_>,
        step: &Step,
        get: &mut dyn FnMut(ValueId) -> Result<Tensor>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        let (ins, outs) = ctx.plan.step_io(step);
        match step {
            Step::Fused(group) => {
                let mut args = Vec::with_capacity(ins.len());
                for &v in &ins {
                    let t = get(v)?;
                    args.push(to_device("fused", &t, ctx.dtype(v), self.place)?);
                }
                let r = run_fused(ctx, group, &args)?;
                Ok(vec![(group.output, r)])
            }
            Step::Epilogue { anchor, bias, add, activation } => {
                let node = ctx.node(*anchor)?;
                let act = activation.map(|a| ctx.node(a)).transpose()?;
                let args = self.node_args(ctx, node, &ins[..node.inputs.len()], get)?;
                let mut dev =
                    |v: ValueId| to_device(&ctx.label(node), &get(v)?, ctx.dtype(v), self.place);
                let bias = bias.map(|b| dev(b.1)).transpose()?;
                let residual = add.map(|a| dev(a.1)).transpose()?;
                let extra =
                    crate::nn::EpilogueArgs { bias: bias.as_ref(), residual: residual.as_ref() };
                let y = crate::nn::run_epilogue(ctx, node, extra, act, &args)?;
                Ok(outs.into_iter().zip([y]).collect())
            }
            Step::Node(i) => {
                let node = ctx.node(*i)?;
                let name = node.op.name();
                let entry = lookup(&name).ok_or_else(|| {
                    Error::unsupported(ctx.label(node), "op is not supported by the engine")
                })?;
                let args = self.node_args(ctx, node, &ins, get)?;
                let results = (entry.run)(ctx, node, &args)?;
                if results.len() < outs.len() {
                    return Err(ctx.err(
                        node,
                        format!(
                            "produced {} outputs, the graph expects {}",
                            results.len(),
                            outs.len()
                        ),
                    ));
                }
                Ok(outs.into_iter().zip(results).collect())
            }
        }
    }

    /// A node's input tensors: on the session's device, except the inputs its op reads on the
    /// host (`OpEntry::host_from` onwards).
    fn node_args(
        &self,
        ctx: &Ctx<'_>,
        node: &Node,
        ins: &[ValueId],
        get: &mut dyn FnMut(ValueId) -> Result<Tensor>,
    ) -> Result<Vec<Tensor>> {
        let host_from = lookup(&node.op.name()).map_or(usize::MAX, |e| e.host_from);
        let mut args = Vec::with_capacity(ins.len());
        for (k, &v) in ins.iter().enumerate() {
            if k >= host_from && self.place.is_gpu() {
                // A parameter read on the host: a constant comes from its host bytes, not from
                // the device copy (reading that back would be a device read on every run, and
                // a capture that reads GPU data is not replayable: Gather over index constants
                // folded from shapes, as transformers' padding mask exports).
                if let Some(h) = ctx.plan.graph.initializers.get(&v) {
                    args.push(host_to_tensor(&ctx.plan.graph.value(v).name, h, Place::Cpu)?);
                    continue;
                }
            }
            let t = get(v)?;
            args.push(if k < host_from {
                to_device(&ctx.label(node), &t, ctx.dtype(v), self.place)?
            } else {
                t
            });
        }
        Ok(args)
    }

    /// Runs the model. Outputs come back in graph order with the dtypes the graph declares
    /// (int64/float64 outputs of a GPU session are returned on the CPU).
    pub fn run(&self, feeds: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        self.execute(feeds, None)
    }

    /// Runs the model once, synchronizing the device after every step, and returns each step's
    /// wall time (for `mpsrt bench --profile`; slower than [`Session::run`] by one round trip
    /// per step). With `repeat > 1` each step is run once for its outputs and then `repeat`
    /// more times between two synchronizations, and the mean of those is reported: the one
    /// submit round trip (~0.1 ms on a discrete GPU) is spread over the repeats, so small
    /// steps show their own cost instead of the round trip's.
    pub fn profile(
        &self,
        feeds: &HashMap<String, Tensor>,
        repeat: usize,
    ) -> Result<Vec<StepProfile>> {
        let mut prof = Vec::new();
        self.execute(feeds, Some((&mut prof, repeat.max(1))))?;
        Ok(prof)
    }

    /// [`Self::execute_steps`]; on the CPU from one of its worker threads, so each step's
    /// parallel part starts on this thread instead of waking the pool and waiting (two thread
    /// wake-ups per step otherwise).
    fn execute(
        &self,
        feeds: &HashMap<String, Tensor>,
        prof: Option<(&mut Vec<StepProfile>, usize)>,
    ) -> Result<Vec<(String, Tensor)>> {
        if self.place == Place::Cpu {
            return mpsrt_tensor::on_cpu_workers(|| self.execute_steps(feeds, prof));
        }
        self.execute_steps(feeds, prof)
    }

    fn execute_steps(
        &self,
        feeds: &HashMap<String, Tensor>,
        mut prof: Option<(&mut Vec<StepProfile>, usize)>,
    ) -> Result<Vec<(String, Tensor)>> {
        let bound = self.bind(feeds)?;
        let plan = self.plan(&bound)?;
        let st = self.state(&plan)?;
        if prof.is_none() && self.replay {
            if let Some(outs) = self.run_replayed(&plan, &st, &bound)? {
                return Ok(outs);
            }
        }
        let ctx = Ctx { plan: &plan, place: self.place };
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        for (i, &v) in plan.graph.inputs.iter().enumerate() {
            if let Some(t) = bound.get(i) {
                env.insert(v, (*t).clone());
            }
        }
        // `--profile`: GPU timestamps before and after each step where the adapter has them.
        let mut timer = match (&prof, self.place) {
            // Two marks per step; a query set holds at most 4096.
            (Some(_), Place::Gpu(i)) if plan.steps.len() <= 2048 => {
                mpsrt_runtime::gpu_device(i)?.gpu_timer(2 * plan.steps.len() as u32)
            }
            _ => None,
        };
        if prof.is_some() {
            self.synchronize()?;
        }
        let mut groups = ConcatRun::default();
        for (s, step) in plan.steps.iter().enumerate() {
            let timed = prof.as_ref().is_some_and(|(_, r)| *r <= 1);
            if let Some(t) = timer.as_mut().filter(|_| timed) {
                t.mark()?;
            }
            let mut t0 = std::time::Instant::now();
            let outs = {
                let env_ref = &env;
                let get = |v| self.fetch(&plan, env_ref, Some(&st), v);
                self.run_step_at(&ctx, &st, s, &get, Some(&mut groups), true, None)?
            };
            let mut host_ms = t0.elapsed().as_secs_f64() * 1e3;
            if let Some(t) = timer.as_mut().filter(|_| timed) {
                t.mark()?;
            }
            if let Some((p, repeat)) = prof.as_mut() {
                self.synchronize()?;
                if *repeat > 1 {
                    if let Some(t) = timer.as_mut() {
                        t.mark()?;
                    }
                    t0 = std::time::Instant::now();
                    for _ in 0..*repeat {
                        let env_ref = &env;
                        let get = |v| self.fetch(&plan, env_ref, Some(&st), v);
                        drop(self.run_step_at(&ctx, &st, s, &get, None, false, None)?);
                    }
                    host_ms = t0.elapsed().as_secs_f64() * 1e3 / *repeat as f64;
                    if let Some(t) = timer.as_mut() {
                        t.mark()?;
                    }
                    self.synchronize()?;
                }
                let (op, name) = match step {
                    Step::Fused(g) => {
                        ("Fused".to_string(), plan.graph.value(g.output).name.clone())
                    }
                    Step::Node(i) => {
                        let node = ctx.node(*i)?;
                        (node.op.name().to_string(), node.name.clone())
                    }
                    Step::Epilogue { anchor, bias, add, activation } => {
                        let node = ctx.node(*anchor)?;
                        let mut op = node.op.name().to_string();
                        op.push_str(if bias.is_some() { "+Bias" } else { "" });
                        op.push_str(if add.is_some() { "+Add" } else { "" });
                        if let Some(a) = activation {
                            op = format!("{op}+{}", ctx.node(*a)?.op.name());
                        }
                        (op, node.name.clone())
                    }
                };
                p.push(StepProfile {
                    op,
                    name,
                    ms: t0.elapsed().as_secs_f64() * 1e3 / *repeat as f64,
                    host_ms,
                    gpu_ms: None,
                });
            }
            for (v, t) in outs {
                env.insert(v, t);
            }
            if let Some(frees) = st.frees.get(s) {
                for v in frees {
                    env.remove(v);
                }
            }
        }
        if let (Some(t), Some((p, repeat))) = (&timer, prof.as_mut()) {
            // Marks come in pairs around each step: the GPU time between them.
            let (ticks, period) = t.read()?;
            let ns = mpsrt_runtime::ticks_to_ns(&ticks, period);
            for (i, step) in p.iter_mut().enumerate() {
                step.gpu_ms = ns.get(2 * i).map(|ns| ns / 1e6 / *repeat as f64);
            }
        }
        let mut result = Vec::with_capacity(plan.graph.outputs.len());
        for &v in &plan.graph.outputs {
            let t = self.fetch(&plan, &env, Some(&st), v)?;
            let info = plan.graph.value(v);
            result.push((info.name.clone(), to_logical(&t, info.dtype)?));
        }
        Ok(result)
    }

    /// Waits for the session's device to finish the work queued so far.
    pub fn synchronize(&self) -> Result<()> {
        if let Place::Gpu(i) = self.place {
            mpsrt_runtime::gpu_device(i)?.synchronize()?;
        }
        Ok(())
    }
}

/// For each step, the values last read there that are neither graph outputs nor inputs.
fn liveness(plan: &Plan, enabled: bool) -> Vec<Vec<ValueId>> {
    let mut frees = vec![Vec::new(); plan.steps.len()];
    if !enabled {
        return frees;
    }
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for (s, step) in plan.steps.iter().enumerate() {
        let (ins, outs) = plan.step_io(step);
        for v in ins.into_iter().chain(outs) {
            last.insert(v, s);
        }
    }
    for (v, s) in last {
        if matches!(plan.storage.get(v.0), Some(Storage::Slot(_))) {
            frees[s].push(v);
        }
    }
    frees
}

/// Refuses a plan (once, when it is first run) with a value whose size cannot be addressed, or
/// that alone is over the host memory limit on the CPU place: a model whose outputs would be
/// huge (`ConstantOfShape [2**20, 2**20]`, `Expand` to `[2**31, 2, 3]`) fails its request with
/// an error naming the value, before any step runs or allocates.
fn check_value_sizes(plan: &Plan, place: Place) -> Result<()> {
    // A value larger than the whole GPU limit fails its allocation anyway: fail before the
    // steps in front of it run (Resize by 1e6 spent 15 s building taps on lavapipe first).
    let gpu_limit = match place {
        Place::Gpu(d) => Some(mpsrt_runtime::gpu_device(d)?.memory_stats().limit),
        Place::Cpu => None,
    };
    for (i, v) in plan.graph.values.iter().enumerate() {
        if plan.graph.initializers.contains_key(&ValueId(i)) {
            continue; // already in memory
        }
        let Some(shape) = v.shape.as_deref().and_then(mpsrt_graph::concrete) else { continue };
        let label = || format!("{OP}: value {:?}", v.name);
        let bytes = mpsrt_core::checked_nbytes(&label(), &shape, v.dtype.size())?;
        match gpu_limit {
            None => mpsrt_runtime::check_host_alloc(&label(), bytes)?,
            Some(limit) if bytes as u64 > limit => {
                return Err(Error::oom(
                    label(),
                    format!(
                        "shape {shape:?} of {} needs {bytes} bytes, more than the memory limit of \
                         {place} ({limit} bytes; MPSRT_MEMORY_LIMIT)",
                        v.dtype
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn poisoned() -> Error {
    Error::device(OP, "session lock poisoned by a panic in another thread")
}

/// Builds a tensor on `place` from a graph host tensor (used by tests and the CLI).
pub fn tensor_from_host(h: &HostTensor, place: Place) -> Result<Tensor> {
    let t = Tensor::from_bytes(&h.bytes, h.dtype, &h.shape, Place::Cpu)?;
    if place.is_gpu() && h.dtype.gpu_supported() {
        t.to(place)
    } else {
        Ok(t)
    }
}
