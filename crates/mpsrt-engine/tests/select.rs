//! Session tests for the mask-and-reduce selection ops (TopK, CumProd, OneHot) and Einsum on
//! graphs built in code, on the CPU and (when an adapter exists) the GPU: edge cases the ONNX
//! node tests do not cover (NaN ordering, reverse-exclusive scans, out-of-range one-hot indices,
//! three-operand einsums with ellipsis broadcasting).

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{Dim, Graph, HostTensor, Op};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    }
    v
}

fn known(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::Known(d)).collect()
}

/// Runs a one-node graph on f32 inputs `(name, shape, data)` and returns its outputs as f64.
fn run(
    op: Op,
    ins: &[(&str, &[usize], &[f32])],
    consts: Vec<HostTensor>,
    n_out: usize,
) -> Vec<Vec<Vec<f64>>> {
    places()
        .into_iter()
        .map(|place| {
            let mut g = Graph::new();
            let mut vals = Vec::new();
            for (name, shape, _) in ins {
                vals.push(g.add_input(*name, DType::F32, known(shape)).unwrap());
            }
            for (i, c) in consts.iter().enumerate() {
                vals.push(g.add_initializer(format!("c{i}"), c.clone()).unwrap());
            }
            let outs: Vec<_> = (0..n_out)
                .map(|i| g.add_value(format!("y{i}"), DType::F32, None).unwrap())
                .collect();
            g.add_node("n", op.clone(), vals, outs.clone());
            g.outputs = outs;
            let s = Session::from_graph(g, place, SessionOptions::default()).unwrap();
            let feeds: HashMap<String, Tensor> = ins
                .iter()
                .map(|(n, sh, d)| (n.to_string(), Tensor::from_slice(d, sh, place).unwrap()))
                .collect();
            let out = s.run(&feeds).unwrap();
            out.iter().map(|(_, t)| t.to_f64_vec().unwrap()).collect()
        })
        .collect()
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| (x.is_nan() && y.is_nan()) || (x - y).abs() < 1e-5)
}

#[test]
fn top_k_orders_nan_first_and_breaks_ties_by_index() {
    let x = [1.0, f32::NAN, 3.0, 3.0, -1.0];
    for largest in [true, false] {
        let op = Op::TopK { axis: -1, k: 3, largest, sorted: true };
        for out in run(op, &[("x", &[1, 5], &x)], vec![], 2) {
            let (v, i) = if largest {
                (vec![f64::NAN, 3.0, 3.0], vec![1.0, 2.0, 3.0])
            } else {
                (vec![-1.0, 1.0, 3.0], vec![4.0, 0.0, 2.0])
            };
            assert!(same(&out[0], &v), "largest={largest}: {:?}", out[0]);
            assert_eq!(out[1], i, "largest={largest}");
        }
    }
}

#[test]
fn cumprod_reverse_exclusive() {
    let op = Op::CumProd { exclusive: true, reverse: true };
    let axis = HostTensor::from_i64(vec![], &[1]);
    for out in run(op, &[("x", &[2, 3], &[1.0, 2.0, 3.0, 0.0, -2.0, 4.0])], vec![axis], 1) {
        assert_eq!(out[0], [6.0, 3.0, 1.0, -8.0, 4.0, 1.0]);
    }
}

#[test]
fn one_hot_wraps_negative_and_ignores_out_of_range() {
    let op = Op::OneHot { axis: 0, depth: 3 };
    let vals = HostTensor::from_f32(vec![2], &[-1.0, 5.0]);
    for out in run(op, &[("i", &[4], &[0.0, -1.0, 3.0, -4.0])], vec![vals], 1) {
        let want = [5.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 5.0, -1.0, -1.0];
        assert_eq!(out[0], want);
    }
}

#[test]
fn einsum_three_operands_with_ellipsis_and_trace() {
    // y[b, i] = sum_{j,k} a[b, i, j] * m[j, k] * v[k], with `a`'s batch dim broadcast from 1.
    let a: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let m = [1.0, 2.0, 3.0, 4.0];
    let v = [1.0, -1.0];
    let op = Op::Einsum { equation: "...ij, jk ,k->...i".into() };
    for out in run(op, &[("a", &[1, 3, 2], &a), ("m", &[2, 2], &m), ("v", &[2], &v)], vec![], 1) {
        // m @ v = [-1, -1]; rows of a: [0,1], [2,3], [4,5].
        assert_eq!(out[0], [-1.0, -5.0, -9.0]);
    }
    let op = Op::Einsum { equation: "ii".into() };
    for out in run(op, &[("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0])], vec![], 1) {
        assert_eq!(out[0], [5.0]);
    }
}
