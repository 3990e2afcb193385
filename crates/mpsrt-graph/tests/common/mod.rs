//! Tiny graph-building helpers shared by the graph tests: input specs as strings so test tables
//! stay one line per case.

#![allow(dead_code)]

use mpsrt_core::DType;
use mpsrt_graph::{Dim, Graph, HostTensor, Op, ValueId};

/// `"f32[N,3,8,8]"` → runtime input; `"=1,-1"` → 1-D int64 constant; `"#5"` → int64 scalar
/// constant; `"i64[3,2]"` → int64 input.
pub fn value(g: &mut Graph, spec: &str, k: usize) -> ValueId {
    let name = format!("in{k}");
    if let Some(vals) = spec.strip_prefix('=') {
        let v: Vec<i64> = if vals.is_empty() {
            vec![]
        } else {
            vals.split(',').map(|s| s.trim().parse().unwrap()).collect()
        };
        return g.add_initializer(name, HostTensor::from_i64(vec![v.len()], &v)).unwrap();
    }
    if let Some(v) = spec.strip_prefix('#') {
        return g
            .add_initializer(name, HostTensor::from_i64(vec![], &[v.parse().unwrap()]))
            .unwrap();
    }
    let (dt, rest) = spec.split_once('[').unwrap();
    let dtype: DType = dt.parse().unwrap();
    let dims = rest.trim_end_matches(']');
    let shape: Vec<Dim> = if dims.is_empty() {
        vec![]
    } else {
        dims.split(',')
            .map(|d| {
                d.trim().parse().map(Dim::Known).unwrap_or_else(|_| Dim::Sym(d.trim().to_string()))
            })
            .collect()
    };
    g.add_input(name, dtype, shape).unwrap()
}

/// A graph with one node of `op` over `inputs` specs, producing `n_out` outputs.
pub fn single(op: Op, inputs: &[&str], n_out: usize) -> Graph {
    let mut g = Graph::new();
    let ins: Vec<ValueId> = inputs.iter().enumerate().map(|(k, s)| value(&mut g, s, k)).collect();
    let outs: Vec<ValueId> =
        (0..n_out).map(|k| g.add_value(format!("out{k}"), DType::F32, None).unwrap()).collect();
    g.add_node("n", op, ins, outs.clone());
    g.outputs = outs;
    g
}

pub fn node(g: &mut Graph, name: &str, op: Op, ins: Vec<ValueId>) -> ValueId {
    let out = g.add_value(name, DType::F32, None).unwrap();
    g.add_node(name, op, ins, vec![out]);
    out
}
