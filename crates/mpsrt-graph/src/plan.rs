//! Execution plans: a specialized (fully concrete) graph, the ordered steps an executor records
//! into one submission, and where every value lives. Intermediates share reusable slots assigned
//! by a liveness-based greedy planner; input-independent nodes are hoisted into `init_steps` that run
//! once per plan; plans are cached per input-shape tuple in a bounded LRU.

use crate::ir::HostTensor;
use crate::ir::{checked_numel, concrete, Graph, ValueId};
use crate::passes::fusion::{
    choose_epilogues, epilogue_candidates, fuse_elementwise, Epilogue, EpilogueChoice,
    FusedElementwise,
};
use crate::propagate::{propagate, specialize_with_values, value_inputs};
use mpsrt_core::{Error, Result};
use std::sync::{Arc, Mutex};

/// Slot sizes are rounded up to this many bytes so any dtype view and vec4 access stays aligned.
pub const SLOT_ALIGN: usize = 16;

/// Where a value's data lives while a plan runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// The caller's i-th input tensor.
    Input(usize),
    /// `plan.graph.initializers[&value]`, uploaded once per plan.
    Constant,
    /// A dedicated buffer for the i-th graph output (never reused, handed to the caller).
    Output(usize),
    /// A reusable intermediate buffer: `plan.slot_bytes[slot]` bytes, data at offset 0.
    Slot(usize),
    /// Computed once by `plan.init_steps` (it depends on constants only, e.g. weights built by
    /// `ConstantOfShape`) and kept for every later run of the plan.
    Persistent,
    /// Computed inside a fused kernel and never materialized (or not used at all).
    None,
}

/// One unit of work; the executor walks `plan.steps` in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Run `plan.graph.nodes[i]` as one op.
    Node(usize),
    /// Run a generated kernel computing the whole group.
    Fused(FusedElementwise),
    /// Run the Conv/Gemm/MatMul node `anchor` with, in its kernel's epilogue, the `Add` node
    /// `bias.0` of the constant bias `bias.1` (MatMul only: N values along the last axis),
    /// the `Add` node `add.0` of the residual value `add.1` (Conv, MatMul) and then the
    /// activation node `activation`; the intermediate values are never stored.
    Epilogue {
        anchor: usize,
        bias: Option<(usize, ValueId)>,
        add: Option<(usize, ValueId)>,
        activation: Option<usize>,
    },
}

/// Byte accounting of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Sum of slot sizes: what the plan allocates for intermediates.
    pub peak_with_reuse: usize,
    /// Sum of all intermediate sizes: what one-buffer-per-value would allocate.
    pub peak_without_reuse: usize,
    /// Largest total of simultaneously live intermediates (a lower bound for any planner).
    pub live_peak: usize,
    /// Bytes of `Storage::Persistent` values (computed once by the init steps).
    pub persistent: usize,
}

/// Planner knobs (both on by default; off exists to measure what each buys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanOptions {
    pub fuse_elementwise: bool,
    pub reuse_memory: bool,
    /// Fold BatchNormalization into a preceding Conv with constant weights, turn the other
    /// constant-parameter BatchNormalizations into a fusable `x * s + t`, merge chains of
    /// per-channel constant Mul/Add/Sub/Div and fold them into a producing Conv too.
    pub fold_batchnorm: bool,
    /// Run Conv/Gemm + Relu/LeakyRelu/Clip and Conv + residual Add (+ activation) as one step
    /// (`Step::Epilogue`).
    pub fuse_epilogues: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            fuse_elementwise: true,
            reuse_memory: true,
            fold_batchnorm: true,
            fuse_epilogues: true,
        }
    }
}

/// A compiled plan for one set of concrete input shapes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The specialized graph: every value has a concrete shape.
    pub graph: Graph,
    /// Steps that depend on constants only: run once (first run of the plan), results kept.
    pub init_steps: Vec<Step>,
    /// Steps run on every inference, in order.
    pub steps: Vec<Step>,
    /// Per `ValueId`.
    pub storage: Vec<Storage>,
    pub slot_bytes: Vec<usize>,
    /// Conv/matmul epilogue candidates; those with only an epilogue activation on a Conv or
    /// Gemm run as `Step::Epilogue` (with `fuse_epilogues`), the rest as separate steps.
    pub epilogues: Vec<Epilogue>,
    pub memory: MemoryStats,
}

impl Plan {
    /// Concrete shape of a value.
    pub fn shape(&self, v: ValueId) -> Vec<usize> {
        self.graph.value(v).shape.as_deref().and_then(concrete).unwrap_or_default()
    }

    /// One line for CLIs and benchmarks: what fusion and the memory planner did.
    pub fn summary(&self) -> String {
        let fused = self.steps.iter().filter(|s| matches!(s, Step::Fused(_))).count();
        let with_act = self.steps.iter().filter(|s| matches!(s, Step::Epilogue { .. })).count();
        let fused_nodes: usize =
            self.steps.iter().map(|s| if let Step::Fused(f) = s { f.nodes.len() } else { 0 }).sum();
        let kib = |b: usize| b.div_ceil(1024);
        format!(
            "{} nodes -> {} steps ({fused} fused kernels covering {fused_nodes} nodes, \
             {with_act} conv/gemm steps with an epilogue), {} init steps; \
             intermediates {} KiB in {} slots (without reuse {} KiB, live peak {} KiB), persistent {} KiB",
            self.graph.nodes.len(),
            self.steps.len(),
            self.init_steps.len(),
            kib(self.memory.peak_with_reuse),
            self.slot_bytes.len(),
            kib(self.memory.peak_without_reuse),
            kib(self.memory.live_peak),
            kib(self.memory.persistent),
        )
    }

    /// Values a step reads and writes (fused steps expose only their external inputs/output).
    pub fn step_io(&self, step: &Step) -> (Vec<ValueId>, Vec<ValueId>) {
        match step {
            Step::Node(i) => {
                (self.graph.nodes[*i].inputs.clone(), self.graph.nodes[*i].outputs.clone())
            }
            Step::Fused(f) => (f.inputs.clone(), vec![f.output]),
            Step::Epilogue { anchor, bias, add, activation } => {
                let mut ins = self.graph.nodes[*anchor].inputs.clone();
                ins.extend(bias.map(|b| b.1));
                ins.extend(add.map(|a| a.1));
                let last = activation.or(add.map(|a| a.0)).or(bias.map(|b| b.0)).unwrap_or(*anchor);
                (ins, self.graph.nodes[last].outputs.clone())
            }
        }
    }
}

/// Lifetime of one planned value, in step indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    pub bytes: usize,
    /// Step that writes it.
    pub first: usize,
    /// Last step that reads it (`first` if never read).
    pub last: usize,
}

/// Result of slot assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub slot_of: Vec<usize>,
    pub slot_bytes: Vec<usize>,
    pub stats: MemoryStats,
}

/// Greedy liveness-based slot assignment. Values are placed in definition order; a slot becomes
/// free after the last step reading its value (not during it, so a step's outputs never alias its
/// inputs). Best fit among free slots; otherwise the largest free slot grows; otherwise a new slot.
pub fn assign_slots(lifetimes: &[Lifetime], reuse: bool) -> Assignment {
    let align = |b: usize| b.div_ceil(SLOT_ALIGN) * SLOT_ALIGN;
    let mut order: Vec<usize> = (0..lifetimes.len()).collect();
    order.sort_by_key(|&i| (lifetimes[i].first, i));
    let mut slot_of = vec![0; lifetimes.len()];
    let mut slot_bytes: Vec<usize> = Vec::new();
    let mut busy_until: Vec<usize> = Vec::new(); // last step reading the slot's current value
    for &i in &order {
        let l = lifetimes[i];
        let need = align(l.bytes);
        let free: Vec<usize> =
            (0..slot_bytes.len()).filter(|&s| reuse && busy_until[s] < l.first).collect();
        let best_fit =
            free.iter().copied().filter(|&s| slot_bytes[s] >= need).min_by_key(|&s| slot_bytes[s]);
        let slot = match best_fit.or_else(|| free.iter().copied().max_by_key(|&s| slot_bytes[s])) {
            Some(s) => s,
            None => {
                slot_bytes.push(0);
                busy_until.push(0);
                slot_bytes.len() - 1
            }
        };
        slot_bytes[slot] = slot_bytes[slot].max(need);
        busy_until[slot] = l.last.max(l.first);
        slot_of[i] = slot;
    }
    let steps = lifetimes.iter().map(|l| l.last.max(l.first) + 1).max().unwrap_or(0);
    let mut live = vec![0usize; steps];
    for l in lifetimes {
        for s in live.iter_mut().take(l.last.max(l.first) + 1).skip(l.first) {
            *s += align(l.bytes);
        }
    }
    let stats = MemoryStats {
        peak_with_reuse: slot_bytes.iter().sum(),
        peak_without_reuse: lifetimes.iter().map(|l| align(l.bytes)).sum(),
        live_peak: live.into_iter().max().unwrap_or(0),
        persistent: 0,
    };
    Assignment { slot_of, slot_bytes, stats }
}

/// Builds the plan for an already specialized graph.
pub fn compile(mut graph: Graph, opts: PlanOptions) -> Result<Plan> {
    // Attention patterns whose scale is computed from shapes (torch's exported SDPA) are only
    // constant once the shapes are concrete.
    if opts.fuse_epilogues && crate::passes::attention::fuse_attention(&mut graph) > 0 {
        crate::passes::dce::eliminate_dead_nodes(&mut graph);
    }
    // Unfused attention's `q·√s` and `kᵀ·√s`: one scale after the product, fused downstream.
    if opts.fuse_epilogues && opts.fuse_elementwise && crate::passes::fusion::matmul_epilogues_on()
    {
        crate::passes::matmul_scale::hoist_matmul_scales(&mut graph);
    }
    let epilogues = epilogue_candidates(&graph);
    let hoisted = hoistable(&graph);
    let hoisted_nodes: Vec<usize> = (0..graph.nodes.len()).filter(|&i| hoisted[i]).collect();
    // Conv/Gemm + activation pairs and Conv + residual Add (+ activation): the kernel's epilogue.
    let epi = if opts.fuse_epilogues {
        let mut e = choose_epilogues(&graph, &hoisted);
        crate::passes::fusion::widen_f16_biases(&mut graph, &mut e);
        e
    } else {
        EpilogueChoice::none(graph.nodes.len())
    };
    let anchored =
        |i: usize| epi.act_of[i].is_some() || epi.add_of[i].is_some() || epi.bias_of[i].is_some();
    let mut exclude = hoisted_nodes.clone();
    exclude.extend((0..graph.nodes.len()).filter(|&i| epi.absorbed[i] || anchored(i)));
    let groups =
        if opts.fuse_elementwise { fuse_elementwise(&graph, &exclude) } else { Vec::new() };
    let mut group_last = vec![None; graph.nodes.len()];
    let mut in_group = vec![false; graph.nodes.len()];
    for (gi, grp) in groups.iter().enumerate() {
        for &n in &grp.nodes {
            in_group[n] = true;
        }
        if let Some(&last) = grp.nodes.last() {
            group_last[last] = Some(gi);
        }
    }
    let mut steps = Vec::new();
    let init_steps: Vec<Step> = hoisted_nodes.iter().map(|&i| Step::Node(i)).collect();
    for i in 0..graph.nodes.len() {
        if hoisted[i] || epi.absorbed[i] {
            continue;
        }
        if anchored(i) {
            steps.push(Step::Epilogue {
                anchor: i,
                bias: epi.bias_of[i],
                add: epi.add_of[i],
                activation: epi.act_of[i],
            });
            continue;
        }
        match group_last[i] {
            Some(gi) => steps.push(Step::Fused(groups[gi].clone())),
            None if !in_group[i] => steps.push(Step::Node(i)),
            None => {}
        }
    }
    let mut storage = vec![Storage::None; graph.values.len()];
    for (i, &v) in graph.inputs.iter().enumerate() {
        storage[v.0] = Storage::Input(i);
    }
    for &v in graph.initializers.keys() {
        storage[v.0] = Storage::Constant;
    }
    for (i, &v) in graph.outputs.iter().enumerate() {
        if storage[v.0] == Storage::None {
            storage[v.0] = Storage::Output(i);
        }
    }
    // The plan under construction, so `step_io` can answer for the steps below.
    let tmp = Plan {
        graph,
        init_steps: Vec::new(),
        steps: Vec::new(),
        storage: Vec::new(),
        slot_bytes: Vec::new(),
        epilogues: Vec::new(),
        memory: MemoryStats::default(),
    };
    // Hoisted values the per-run steps read stay persistent; those only the init steps read
    // (a light model's ConstantOfShape weight before its BatchNorm-folding Mul) are dropped
    // after the init steps.
    let mut read_by_steps = vec![false; tmp.graph.values.len()];
    for step in &steps {
        for v in tmp.step_io(step).0 {
            read_by_steps[v.0] = true;
        }
    }
    let mut persistent = 0usize;
    for &n in &hoisted_nodes {
        for &v in &tmp.graph.nodes[n].outputs {
            if storage[v.0] == Storage::None && read_by_steps[v.0] {
                storage[v.0] = Storage::Persistent;
                persistent += value_bytes(&tmp.graph, v)?.div_ceil(SLOT_ALIGN) * SLOT_ALIGN;
            }
        }
    }
    // Lifetimes of the values steps write that are not inputs/constants/outputs.
    let mut planned: Vec<ValueId> = Vec::new();
    let mut lifetimes: Vec<Lifetime> = Vec::new();
    let mut index_of = vec![usize::MAX; tmp.graph.values.len()];
    for (s, step) in steps.iter().enumerate() {
        let (ins, outs) = tmp.step_io(step);
        for v in ins {
            if index_of[v.0] != usize::MAX {
                lifetimes[index_of[v.0]].last = s;
            }
        }
        for v in outs {
            if storage[v.0] != Storage::None || index_of[v.0] != usize::MAX {
                continue;
            }
            let bytes = value_bytes(&tmp.graph, v)?;
            index_of[v.0] = lifetimes.len();
            planned.push(v);
            lifetimes.push(Lifetime { bytes, first: s, last: s });
        }
    }
    let a = assign_slots(&lifetimes, opts.reuse_memory);
    for (k, &v) in planned.iter().enumerate() {
        storage[v.0] = Storage::Slot(a.slot_of[k]);
    }
    let memory = MemoryStats { persistent, ..a.stats };
    Ok(Plan { init_steps, steps, storage, slot_bytes: a.slot_bytes, epilogues, memory, ..tmp })
}

fn value_bytes(g: &Graph, v: ValueId) -> Result<usize> {
    let info = g.value(v);
    let shape = info.shape.as_deref().and_then(concrete).ok_or_else(|| {
        Error::shape(
            "plan",
            format!("value {:?} has no concrete shape; specialize the graph first", info.name),
        )
    })?;
    checked_numel(&shape).and_then(|n| n.checked_mul(info.dtype.size())).ok_or_else(|| {
        Error::shape("plan", format!("value {:?} of shape {shape:?} is too large", info.name))
    })
}

/// Nodes whose inputs are all constants or outputs of other such nodes: they compute the same
/// result on every run (the folder left them because they are large), so they run once.
fn hoistable(g: &Graph) -> Vec<bool> {
    let mut constant = vec![false; g.values.len()];
    for v in g.initializers.keys() {
        constant[v.0] = true;
    }
    let outputs: std::collections::HashSet<ValueId> = g.outputs.iter().copied().collect();
    g.nodes
        .iter()
        .map(|n| {
            let h = n.inputs.iter().all(|v| constant[v.0])
                && !n.outputs.iter().any(|o| outputs.contains(o));
            if h {
                for o in &n.outputs {
                    constant[o.0] = true;
                }
            }
            h
        })
        .collect()
}

/// What a plan is specialized on: every input's shape, plus the values of the value inputs
/// (see [`CompiledGraph::value_inputs`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanKey {
    pub shapes: Vec<Vec<usize>>,
    /// Value inputs' contents as raw bytes, in `value_inputs` order.
    pub values: Vec<Vec<u8>>,
}

/// A bounded least-recently-used cache of plans keyed by input shapes (and shape-deciding values).
#[derive(Debug)]
pub struct PlanCache {
    capacity: usize,
    /// Most recently used last.
    entries: Vec<(PlanKey, Arc<Plan>)>,
}

impl PlanCache {
    pub fn new(capacity: usize) -> Self {
        PlanCache { capacity: capacity.max(1), entries: Vec::new() }
    }

    pub fn get(&mut self, key: &PlanKey) -> Option<Arc<Plan>> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        let e = self.entries.remove(pos);
        let plan = e.1.clone();
        self.entries.push(e);
        Some(plan)
    }

    pub fn insert(&mut self, key: PlanKey, plan: Arc<Plan>) {
        self.entries.retain(|(k, _)| *k != key);
        if self.entries.len() >= self.capacity {
            self.entries.remove(0);
        }
        self.entries.push((key, plan));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Default number of cached plans per model (distinct input-shape tuples).
pub const DEFAULT_PLAN_CACHE: usize = 16;

/// A graph ready to run: symbolic shapes inferred, plans built on demand per input shapes.
#[derive(Debug)]
pub struct CompiledGraph {
    graph: Graph,
    options: PlanOptions,
    value_inputs: Vec<usize>,
    cache: Mutex<PlanCache>,
}

impl CompiledGraph {
    /// Infers symbolic shapes (folding what is already constant) and keeps the graph.
    pub fn new(mut graph: Graph, options: PlanOptions) -> Result<Self> {
        graph.validate()?;
        propagate(&mut graph, true)?;
        crate::passes::simplify::remove_identities(&mut graph);
        if options.fold_batchnorm {
            crate::passes::fold_bn::fold_batchnorm_into_conv(&mut graph);
            crate::passes::fold_bn::batchnorm_to_affine(&mut graph);
            crate::passes::affine::fold_affine(&mut graph);
        }
        if options.fuse_epilogues {
            // x · Sigmoid(x) as one Swish node: one elementwise step, or a conv epilogue.
            crate::passes::simplify::fuse_silu(&mut graph);
            // MatMul → scale → mask → Softmax → MatMul as one Attention node (fused on GPUs).
            crate::passes::attention::fuse_attention(&mut graph);
        }
        crate::passes::dce::eliminate_dead_nodes(&mut graph);
        let value_inputs = value_inputs(&graph);
        Ok(CompiledGraph {
            graph,
            options,
            value_inputs,
            cache: Mutex::new(PlanCache::new(DEFAULT_PLAN_CACHE)),
        })
    }

    /// The symbolic graph (input/output names, dtypes and shapes for metadata).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Indices (into `graph().inputs`) of inputs whose values decide shapes (e.g. a Reshape
    /// target fed as a graph input). Usually empty; when not, use [`CompiledGraph::plan_with_values`].
    pub fn value_inputs(&self) -> &[usize] {
        &self.value_inputs
    }

    /// The plan for these input shapes (in `graph().inputs` order), from the cache or built now.
    pub fn plan(&self, input_shapes: &[Vec<usize>]) -> Result<Arc<Plan>> {
        self.plan_with_values(input_shapes, &[])
    }

    /// Like [`CompiledGraph::plan`], with the host values of the `value_inputs()` in that order.
    pub fn plan_with_values(
        &self,
        input_shapes: &[Vec<usize>],
        values: &[HostTensor],
    ) -> Result<Arc<Plan>> {
        if values.len() != self.value_inputs.len() {
            let names: Vec<&str> = self
                .value_inputs
                .iter()
                .map(|&i| self.graph.value(self.graph.inputs[i]).name.as_str())
                .collect();
            return Err(Error::invalid(
                "plan",
                format!("the shapes of this graph depend on the values of inputs {names:?}: pass {} values, got {}", names.len(), values.len()),
            ));
        }
        let key = PlanKey {
            shapes: input_shapes.to_vec(),
            values: values.iter().map(|t| t.bytes.clone()).collect(),
        };
        if let Some(p) = self.cache.lock().map_err(|_| poisoned())?.get(&key) {
            return Ok(p);
        }
        let bound: Vec<(usize, HostTensor)> =
            self.value_inputs.iter().copied().zip(values.iter().cloned()).collect();
        let plan = Arc::new(compile(
            specialize_with_values(&self.graph, input_shapes, &bound)?,
            self.options,
        )?);
        self.cache.lock().map_err(|_| poisoned())?.insert(key, plan.clone());
        Ok(plan)
    }

    /// Number of plans currently cached.
    pub fn cached_plans(&self) -> usize {
        self.cache.lock().map(|c| c.len()).unwrap_or(0)
    }
}

fn poisoned() -> Error {
    Error::device("plan", "plan cache lock poisoned by a panic in another thread")
}
