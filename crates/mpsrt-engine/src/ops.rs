//! The op table: each op family module contributes `OpEntry`s (op name → function); the session
//! looks ops up here at load time (to refuse unsupported models up front) and per step.

use crate::value::device_dtype;
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_graph::{Node, Plan, ValueId};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Runs one node: `inputs` are the node's input values (device data before `host_from`, raw
/// values — possibly CPU int64 — from `host_from` on); returns its outputs in order.
pub(crate) type OpFn = fn(&Ctx<'_>, &Node, &[Tensor]) -> Result<Vec<Tensor>>;

/// One row of the op table.
#[derive(Clone, Copy)]
pub(crate) struct OpEntry {
    /// `Op::name()` of the ops this row runs.
    pub name: &'static str,
    pub run: OpFn,
    /// Inputs at this index and after are parameters read on the host (shape, starts, repeats):
    /// they are passed as stored rather than moved to the device.
    pub host_from: usize,
}

fn table() -> &'static HashMap<&'static str, OpEntry> {
    static TABLE: OnceLock<HashMap<&'static str, OpEntry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut m = HashMap::new();
        let families = [
            crate::elementwise::entries(),
            crate::shape::entries(),
            crate::nn::entries(),
            crate::attention::entries(),
            crate::reduce::entries(),
            crate::loss::entries(),
            crate::index::entries(),
            crate::norm::entries(),
            crate::resize::entries(),
            crate::quant::entries(),
            crate::scatter::entries(),
            crate::select::entries(),
            crate::einsum::entries(),
        ];
        for e in families.into_iter().flatten() {
            m.insert(e.name, e);
        }
        m
    })
}

/// The table row for an op name.
pub(crate) fn lookup(name: &str) -> Option<OpEntry> {
    table().get(name).copied()
}

/// Every op name the engine maps, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = table().keys().copied().collect();
    v.sort_unstable();
    v
}

/// What an op function may ask about the plan it runs in.
pub(crate) struct Ctx<'a> {
    pub plan: &'a Plan,
    pub place: Place,
}

impl Ctx<'_> {
    pub fn node(&self, i: usize) -> Result<&Node> {
        self.plan
            .graph
            .nodes
            .get(i)
            .ok_or_else(|| Error::invalid("engine", format!("plan refers to missing node {i}")))
    }

    /// Concrete shape of a value in this plan.
    pub fn shape(&self, v: ValueId) -> Vec<usize> {
        self.plan.shape(v)
    }

    /// The dtype the graph declares for a value.
    pub fn dtype(&self, v: ValueId) -> DType {
        self.plan.graph.value(v).dtype
    }

    /// The dtype a value has on this session's place.
    pub fn device_dtype(&self, v: ValueId) -> DType {
        device_dtype(self.dtype(v), self.place)
    }

    /// `"[Conv conv1]"`-style label of a node for messages.
    pub fn label(&self, node: &Node) -> String {
        if node.name.is_empty() {
            node.op.name()
        } else {
            format!("{} {}", node.op.name(), node.name)
        }
    }

    pub fn err(&self, node: &Node, msg: impl Into<String>) -> Error {
        Error::invalid(self.label(node), msg)
    }

    /// Prefixes an error from a tensor op with the node it came from.
    pub fn wrap(&self, node: &Node, e: Error) -> Error {
        Error::new(e.kind, self.label(node), e.to_string())
    }

    /// Output `i`'s concrete shape.
    pub fn out_shape(&self, node: &Node, i: usize) -> Result<Vec<usize>> {
        node.outputs
            .get(i)
            .map(|&v| self.shape(v))
            .ok_or_else(|| self.err(node, format!("has no output {i}")))
    }

    /// Input `i` or an error naming the node.
    pub fn input<'t>(&self, node: &Node, inputs: &'t [Tensor], i: usize) -> Result<&'t Tensor> {
        inputs
            .get(i)
            .ok_or_else(|| self.err(node, format!("expects input {i}, got {}", inputs.len())))
    }
}
