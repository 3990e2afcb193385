//! The per-node import context handed to every importer: typed attribute access with defaults,
//! input lookup (optional inputs, constant inputs), and emitting graph nodes.

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, NodeProto};
use crate::tensor::to_host;
use mpsrt_core::{Error, Result};
use mpsrt_graph::{Graph, HostTensor, Op, ValueId};
use std::path::Path;

/// State for importing one ONNX node.
pub struct Ctx<'a> {
    pub graph: &'a mut Graph,
    /// The default-domain opset the model imports.
    pub opset: i64,
    pub node: &'a NodeProto,
    pub base_dir: Option<&'a Path>,
    /// ONNX element type codes of the graph's declared values (inputs, outputs, value_info,
    /// initializers), for ops whose semantics depend on a type mpsrt widens (int16 → int32).
    pub elem_types: &'a std::collections::HashMap<String, i32>,
}

impl<'a> Ctx<'a> {
    pub fn op_type(&self) -> &str {
        self.node.op_type.as_deref().unwrap_or("")
    }

    pub fn name(&self) -> String {
        self.node.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| {
            self.node.output.first().map(|o| format!("-> {o}")).unwrap_or_default()
        })
    }

    /// Error prefix: op type and node name (`"Conv conv1"`).
    pub fn op(&self) -> String {
        format!("{} {}", self.op_type(), self.name())
    }

    pub fn invalid(&self, msg: impl Into<String>) -> Error {
        Error::invalid(self.op(), msg)
    }

    pub fn unsupported(&self, msg: impl Into<String>) -> Error {
        Error::unsupported(self.op(), msg)
    }

    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name.as_deref() == Some(name))
    }

    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>> {
        let Some(a) = self.attr(name) else { return Ok(None) };
        if a.ref_attr_name.is_some() {
            return Err(
                self.unsupported(format!("attribute {name:?} refers to a function attribute"))
            );
        }
        // Old exporters leave `type` unset; accept when the expected field is present.
        match a.r#type {
            Some(t) if t != want as i32 => Err(self.invalid(format!(
                "attribute {name:?} has type {}, expected {}",
                AttributeType::try_from(t).map(|t| t.as_str_name()).unwrap_or("?"),
                want.as_str_name()
            ))),
            _ => Ok(Some(a)),
        }
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.typed(name, AttributeType::Int)?.and_then(|a| a.i).unwrap_or(default))
    }

    pub fn req_int(&self, name: &str) -> Result<i64> {
        self.typed(name, AttributeType::Int)?
            .and_then(|a| a.i)
            .ok_or_else(|| self.invalid(format!("attribute {name:?} is required")))
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.typed(name, AttributeType::Float)?.and_then(|a| a.f).unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String> {
        Ok(self
            .typed(name, AttributeType::String)?
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_else(|| default.to_string()))
    }

    pub fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        match self.typed(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()) {
            Some(t) => Ok(Some(to_host(t, self.base_dir).map_err(|e| self.invalid(e.message))?)),
            None => Ok(None),
        }
    }

    /// Non-negative integer list attribute (sizes, strides...), empty when absent.
    pub fn usizes(&self, name: &str) -> Result<Vec<usize>> {
        let v = self.ints(name)?.unwrap_or_default();
        v.iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| {
                    self.invalid(format!("attribute {name:?} has a negative entry: {v:?}"))
                })
            })
            .collect()
    }

    /// Whether input `i` is present (ONNX marks skipped optional inputs with an empty name).
    pub fn has_input(&self, i: usize) -> bool {
        self.node.input.get(i).is_some_and(|n| !n.is_empty())
    }

    pub fn opt_input(&self, i: usize) -> Result<Option<ValueId>> {
        if !self.has_input(i) {
            return Ok(None);
        }
        let name = &self.node.input[i];
        self.graph
            .find(name)
            .map(Some)
            .ok_or_else(|| self.invalid(format!("input {name:?} is not defined in the graph")))
    }

    /// The declared ONNX element type code of input `i`, when the model declares it.
    pub fn onnx_elem_type(&self, i: usize) -> Option<i32> {
        self.node.input.get(i).and_then(|n| self.elem_types.get(n)).copied()
    }

    pub fn input(&self, i: usize) -> Result<ValueId> {
        self.opt_input(i)?.ok_or_else(|| self.invalid(format!("input {i} is required")))
    }

    /// The constant value of input `i` if it is an initializer (or a Constant node's output).
    pub fn const_input(&self, i: usize) -> Result<Option<HostTensor>> {
        Ok(self.opt_input(i)?.and_then(|v| self.graph.initializers.get(&v).cloned()))
    }

    /// Input `i` must be a constant (for inputs mpsrt resolves at load time, e.g. axes).
    pub fn req_const_input(&self, i: usize, what: &str) -> Result<HostTensor> {
        self.const_input(i)?.ok_or_else(|| {
            self.unsupported(format!("{what} (input {i}) must be a constant initializer; computed {what} are not supported"))
        })
    }

    /// The graph values of this node's outputs (an empty name gets an unnamed temporary).
    pub fn outputs(&mut self) -> Result<Vec<ValueId>> {
        let mut out = Vec::new();
        // Trailing skipped outputs are dropped so ops with optional extra outputs fit.
        let n = self.node.output.iter().rposition(|o| !o.is_empty()).map_or(0, |i| i + 1);
        for name in &self.node.output[..n] {
            out.push(if name.is_empty() {
                self.graph.add_temp("unused", mpsrt_core::DType::F32)
            } else {
                self.graph.find(name).ok_or_else(|| {
                    Error::invalid(self.op(), format!("output {name:?} was not registered"))
                })?
            });
        }
        Ok(out)
    }

    /// Emits `op` producing this node's outputs.
    pub fn emit(&mut self, op: Op, inputs: Vec<ValueId>) -> Result<()> {
        let outs = self.outputs()?;
        let name = self.name();
        self.graph.add_node(name, op, inputs, outs);
        Ok(())
    }

    /// Emits a helper node with one fresh output (for ops expanded into several nodes).
    pub fn emit_tmp(&mut self, op: Op, inputs: Vec<ValueId>) -> ValueId {
        let v = self.graph.add_temp(&self.name(), mpsrt_core::DType::F32);
        let name = format!("{}#{}", self.name(), v.0);
        self.graph.add_node(name, op, inputs, vec![v]);
        v
    }

    /// Adds a constant initializer with a fresh name.
    pub fn constant(&mut self, t: HostTensor) -> ValueId {
        let v = self.graph.add_temp(&format!("{}_const", self.name()), t.dtype);
        self.graph.value_mut(v).shape = Some(mpsrt_graph::dims(&t.shape));
        self.graph.initializers.insert(v, t);
        v
    }

    /// Binds this node's single output to a constant (Constant nodes become initializers).
    pub fn bind_constant(&mut self, t: HostTensor) -> Result<()> {
        let out = *self.outputs()?.first().ok_or_else(|| self.invalid("node has no output"))?;
        let v = self.graph.value_mut(out);
        v.dtype = t.dtype;
        v.shape = Some(mpsrt_graph::dims(&t.shape));
        self.graph.initializers.insert(out, t);
        Ok(())
    }

    /// Rejects the node when any output beyond the first `n` is actually requested.
    pub fn only_outputs(&self, n: usize, what: &str) -> Result<()> {
        if self.node.output.iter().skip(n).any(|o| !o.is_empty()) {
            return Err(self.unsupported(format!("{what} output is not supported")));
        }
        Ok(())
    }
}
