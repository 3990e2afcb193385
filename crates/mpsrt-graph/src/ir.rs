//! The graph data structures: values (with symbolic shapes), host tensors, nodes and the graph.
//!
//! Values are addressed by dense `ValueId` indices rather than names so passes and the executor can
//! use plain vectors; names are kept for error messages and for binding inputs/outputs.

use crate::op::Op;
use mpsrt_core::{DType, Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// One dimension of a value's shape: known, or a named symbol (`"batch"`, `"seq"`) bound when
/// the graph is specialized to concrete input shapes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    Known(usize),
    Sym(String),
}

impl Dim {
    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// Formats a symbolic shape as `[batch, 3, 224, 224]` for error messages.
pub fn shape_str(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The concrete shape if every dimension is known.
pub fn concrete(shape: &[Dim]) -> Option<Vec<usize>> {
    shape.iter().map(Dim::known).collect()
}

/// Lifts a concrete shape into symbolic form.
pub fn dims(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Known(d)).collect()
}

/// Index of a value in `Graph::values`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// What is known about a value before running: element type and (possibly symbolic) shape.
/// `shape == None` means the rank is not known yet (before inference).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Option<Vec<Dim>>,
}

/// An element type a model can declare for a value. Values are stored in the [`DType`] that
/// [`ElemType::stored`] gives (`int16`/`uint16` widen to `int32`, `uint32`/`uint64` to
/// `int64`); the declared type is kept for metadata (`get_inputs()`, servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Bool,
    F16,
    F64,
    U32,
    U64,
}

impl ElemType {
    /// The dtype values of this type are stored and computed in.
    pub fn stored(self) -> DType {
        match self {
            ElemType::F32 => DType::F32,
            ElemType::U8 => DType::U8,
            ElemType::I8 => DType::I8,
            ElemType::U16 | ElemType::I16 | ElemType::I32 => DType::I32,
            ElemType::I64 | ElemType::U32 | ElemType::U64 => DType::I64,
            ElemType::Bool => DType::Bool,
            ElemType::F16 => DType::F16,
            ElemType::F64 => DType::F64,
        }
    }

    /// The NumPy name (`"uint16"`), matching [`DType::name`] for the stored types.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::U16 => "uint16",
            ElemType::I16 => "int16",
            ElemType::U32 => "uint32",
            ElemType::U64 => "uint64",
            other => other.stored().name(),
        }
    }
}

/// What a model declares for a graph input or output, before import widens its element type
/// and inference refines its shape. `Default` (nothing declared) for graphs built by hand.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Declared {
    /// `None` when no element type is given, or one mpsrt cannot hold.
    pub elem: Option<ElemType>,
    /// `None` when no shape is given (rank unknown); a dim is `None` when declared with neither
    /// a value nor a name.
    pub shape: Option<Vec<Option<Dim>>>,
}

/// A graph input or output as metadata shows it ([`Graph::input_signature`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub name: String,
    /// The dtype the value is stored in.
    pub dtype: DType,
    /// The symbolic shape (an input's declared one, an output's inferred one); `None` when
    /// the rank is not known symbolically.
    pub shape: Option<Vec<Dim>>,
    pub declared: Declared,
}

/// A dense little-endian tensor held on the host: initializers, folded constants, attribute values.
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Weights can be megabytes; print the header and at most a few values.
        let n = self.bytes.len().min(8 * self.dtype.size());
        let head = HostTensor { dtype: self.dtype, shape: vec![], bytes: self.bytes[..n].to_vec() }
            .to_f64_vec();
        let more = if self.bytes.len() > n { "..." } else { "" };
        write!(f, "HostTensor({} {:?} {:?}{more})", self.dtype, self.shape, head)
    }
}

impl HostTensor {
    /// Builds a tensor, checking that the byte length matches dtype and shape.
    pub fn new(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Result<Self> {
        let n = checked_numel(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| Error::shape("tensor", format!("shape {shape:?} overflows")))?;
        if n != bytes.len() {
            return Err(Error::shape(
                "tensor",
                format!("{dtype} tensor of shape {shape:?} needs {n} bytes, got {}", bytes.len()),
            ));
        }
        Ok(HostTensor { dtype, shape, bytes })
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// An int64 tensor (the type of every ONNX shape/index tensor).
    pub fn from_i64(shape: Vec<usize>, vals: &[i64]) -> Self {
        HostTensor {
            dtype: DType::I64,
            shape,
            bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    pub fn from_f32(shape: Vec<usize>, vals: &[f32]) -> Self {
        HostTensor {
            dtype: DType::F32,
            shape,
            bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Builds a tensor of `dtype` from f64 values (converted like NumPy's `astype`).
    pub fn from_f64(dtype: DType, shape: Vec<usize>, vals: &[f64]) -> Self {
        let mut bytes = Vec::with_capacity(vals.len() * dtype.size());
        for &v in vals {
            match dtype {
                DType::Bool => bytes.push((v != 0.0) as u8),
                DType::U8 => bytes.push(v as u8),
                DType::I8 => bytes.push(v as i8 as u8),
                DType::I32 => bytes.extend((v as i32).to_le_bytes()),
                DType::I64 => bytes.extend((v as i64).to_le_bytes()),
                DType::F16 => bytes.extend(f16_bits(v).to_le_bytes()),
                DType::F32 => bytes.extend((v as f32).to_le_bytes()),
                DType::F64 => bytes.extend(v.to_le_bytes()),
            }
        }
        HostTensor { dtype, shape, bytes }
    }

    /// Values widened to i64 (floats truncate); used by the shape evaluator.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match self.dtype {
            DType::I64 => self
                .bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DType::I32 => self
                .bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
                .collect(),
            _ => self.to_f64_vec().into_iter().map(|v| v as i64).collect(),
        }
    }

    /// Values widened to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let b = &self.bytes;
        match self.dtype {
            DType::Bool | DType::U8 => b.iter().map(|&v| v as f64).collect(),
            DType::I8 => b.iter().map(|&v| v as i8 as f64).collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            DType::I64 => self.to_i64_vec().into_iter().map(|v| v as f64).collect(),
            DType::F16 => {
                b.chunks_exact(2).map(|c| f16_to_f64(u16::from_le_bytes([c[0], c[1]]))).collect()
            }
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            DType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        }
    }
}

/// Element count with overflow detection (shapes come from untrusted files).
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

// Minimal IEEE half conversions so the graph crate needs no `half` dependency for folding.
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 => {
            if frac == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        e => sign * (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

fn f16_bits(v: f64) -> u16 {
    // Round-trip through f32 bit manipulation (round toward zero on the mantissa is enough for
    // the small constants that get folded).
    let x = (v as f32).to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32 - 127 + 15;
    let mant = x & 0x7f_ffff;
    if (x & 0x7fff_ffff) > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    if exp <= 0 {
        if exp < -10 {
            return sign;
        }
        let m = (mant | 0x80_0000) >> (14 - exp);
        return sign | m as u16;
    }
    sign | ((exp as u16) << 10) | (mant >> 13) as u16
}

/// One operation: an op with typed attributes, reading and writing values.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub name: String,
}

/// A dataflow graph. `nodes` are kept in topological order by every constructor and pass.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub values: Vec<ValueInfo>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub nodes: Vec<Node>,
    pub initializers: BTreeMap<ValueId, HostTensor>,
    /// What the model declares for its inputs and outputs (kept apart: a graph output may be
    /// a graph input too, with another declaration); missing for values built by hand.
    pub declared_inputs: HashMap<ValueId, Declared>,
    pub declared_outputs: HashMap<ValueId, Declared>,
    by_name: HashMap<String, ValueId>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value; names must be unique within the graph.
    pub fn add_value(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: Option<Vec<Dim>>,
    ) -> Result<ValueId> {
        let name = name.into();
        if self.by_name.contains_key(&name) {
            return Err(Error::invalid("graph", format!("value {name:?} is defined twice")));
        }
        let id = ValueId(self.values.len());
        self.by_name.insert(name.clone(), id);
        self.values.push(ValueInfo { name, dtype, shape });
        Ok(id)
    }

    /// Adds a value with a fresh name derived from `hint` (for values the importer synthesizes).
    pub fn add_temp(&mut self, hint: &str, dtype: DType) -> ValueId {
        let mut i = self.values.len();
        loop {
            let name = format!("{hint}__{i}");
            if let Ok(id) = self.add_value(name, dtype, None) {
                return id;
            }
            i += 1;
        }
    }

    pub fn add_input(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<Dim>,
    ) -> Result<ValueId> {
        let id = self.add_value(name, dtype, Some(shape))?;
        self.inputs.push(id);
        Ok(id)
    }

    pub fn add_initializer(&mut self, name: impl Into<String>, t: HostTensor) -> Result<ValueId> {
        let id = self.add_value(name, t.dtype, Some(dims(&t.shape)))?;
        self.initializers.insert(id, t);
        Ok(id)
    }

    /// Appends a node; outputs must be values without a producer yet.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: Vec<ValueId>,
        outputs: Vec<ValueId>,
    ) {
        self.nodes.push(Node { op, inputs, outputs, name: name.into() });
    }

    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.0]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut ValueInfo {
        &mut self.values[id.0]
    }

    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// Number of nodes consuming each value (graph outputs count as a consumer).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut n = vec![0; self.values.len()];
        for node in &self.nodes {
            for i in &node.inputs {
                n[i.0] += 1;
            }
        }
        for o in &self.outputs {
            n[o.0] += 1;
        }
        n
    }

    /// For each value, the index of the node producing it.
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.values.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for o in &node.outputs {
                p[o.0] = Some(i);
            }
        }
        p
    }

    /// Checks structural invariants: ids in range, single producer, topological order, every
    /// consumed value defined by an input, initializer or earlier node.
    pub fn validate(&self) -> Result<()> {
        let n = self.values.len();
        let mut defined = vec![false; n];
        let bad = |id: ValueId| id.0 >= n;
        for &i in self.inputs.iter().chain(self.initializers.keys()) {
            if bad(i) {
                return Err(Error::invalid("graph", format!("input id {} out of range", i.0)));
            }
            defined[i.0] = true;
        }
        for node in &self.nodes {
            for &i in &node.inputs {
                if bad(i) || !defined[i.0] {
                    let what = if bad(i) {
                        "unknown value".to_string()
                    } else {
                        format!("{:?}", self.values[i.0].name)
                    };
                    return Err(Error::invalid(
                        format!("{} {}", node.op.name(), node.name),
                        format!("input {what} is not produced before this node"),
                    ));
                }
            }
            for &o in &node.outputs {
                if bad(o) || defined[o.0] {
                    return Err(Error::invalid(
                        format!("{} {}", node.op.name(), node.name),
                        "output is already defined (values must have exactly one producer)"
                            .to_string(),
                    ));
                }
                defined[o.0] = true;
            }
        }
        for &o in &self.outputs {
            if bad(o) || !defined[o.0] {
                return Err(Error::invalid(
                    "graph",
                    "a graph output is never produced".to_string(),
                ));
            }
        }
        Ok(())
    }

    /// Reorders nodes topologically (importers may receive unsorted node lists); errors on cycles.
    pub fn toposort(&mut self) -> Result<()> {
        let producers = self.producers();
        let mut state = vec![0u8; self.nodes.len()]; // 0 new, 1 visiting, 2 done
        let mut order = Vec::with_capacity(self.nodes.len());
        for start in 0..self.nodes.len() {
            // Iterative DFS: models can be thousands of nodes deep, recursion could overflow.
            let mut stack = vec![(start, 0usize)];
            while let Some((n, k)) = stack.pop() {
                if k == 0 {
                    if state[n] == 2 {
                        continue;
                    }
                    if state[n] == 1 {
                        return Err(Error::invalid(
                            "graph",
                            format!("cycle through node {:?}", self.nodes[n].name),
                        ));
                    }
                    state[n] = 1;
                }
                let ins = &self.nodes[n].inputs;
                if k < ins.len() {
                    stack.push((n, k + 1));
                    if let Some(p) = producers.get(ins[k].0).copied().flatten() {
                        if state[p] == 1 {
                            return Err(Error::invalid(
                                "graph",
                                format!("cycle through node {:?}", self.nodes[p].name),
                            ));
                        }
                        if state[p] == 0 {
                            stack.push((p, 0));
                        }
                    }
                } else {
                    state[n] = 2;
                    order.push(n);
                }
            }
        }
        let mut old: Vec<Option<Node>> =
            std::mem::take(&mut self.nodes).into_iter().map(Some).collect();
        self.nodes = order.into_iter().filter_map(|i| old[i].take()).collect();
        Ok(())
    }

    /// Fails with every op (and its count) that `supported` rejects, so an executor can refuse a
    /// model at load time instead of midway through a run. Ops are named as `Op::name` gives.
    pub fn check_ops(&self, what: &str, supported: impl Fn(&Op) -> bool) -> Result<()> {
        let mut missing: BTreeMap<String, usize> = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| !supported(&n.op)) {
            *missing.entry(n.op.name()).or_default() += 1;
        }
        if missing.is_empty() {
            return Ok(());
        }
        let mut list: Vec<(String, usize)> = missing.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let parts: Vec<String> = list.iter().map(|(t, n)| format!("{t} \u{d7}{n}")).collect();
        Err(Error::unsupported(
            what,
            format!(
                "model uses {} op type{} not supported here: {}",
                list.len(),
                if list.len() == 1 { "" } else { "s" },
                parts.join(", ")
            ),
        ))
    }

    /// Every graph input, for metadata (servers, `get_inputs()`).
    pub fn input_signature(&self) -> Vec<Signature> {
        self.signature(&self.inputs, &self.declared_inputs)
    }

    /// Every graph output (`shape` is `None` if not inferable symbolically).
    pub fn output_signature(&self) -> Vec<Signature> {
        self.signature(&self.outputs, &self.declared_outputs)
    }

    fn signature(&self, ids: &[ValueId], declared: &HashMap<ValueId, Declared>) -> Vec<Signature> {
        ids.iter()
            .map(|&i| {
                let v = self.value(i);
                Signature {
                    name: v.name.clone(),
                    dtype: v.dtype,
                    shape: v.shape.clone(),
                    declared: declared.get(&i).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }
}
