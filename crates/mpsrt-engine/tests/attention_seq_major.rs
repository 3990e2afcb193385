//! `MPSRT_ATTENTION_F32_SEQ_MAJOR=1`: the composed f32 attention's `p·v` stores `[b, s, h, d]`
//! (`mpsrt_tensor::matmul_seq_major`), so the exporter's `Transpose` + `Reshape` to
//! `[b, s, h·d]` after it is a view. BERT's NaN-guarded export of the pattern agrees with the
//! unfused CPU plan with the knob off and on, and on GPUs the replay with it on has one
//! dispatch fewer (the copy). Its own test binary: the knob is an environment variable.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, HostTensor, Op, UnaryOp};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;

/// Deterministic values in ±0.5.
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
        })
        .collect()
}

/// BERT's attention as the SDPA export writes it, NaN guard included, then the heads merged:
/// `[b, h, s, d]` → `Transpose(0, 2, 1, 3)` → `Reshape [b, s, h·d]`.
fn graph([b, h, s, d]: [usize; 4]) -> Graph {
    let mut g = Graph::new();
    let dims = |x: &[usize]| x.iter().map(|&v| Dim::Known(v)).collect::<Vec<_>>();
    let f = DType::F32;
    let q = g.add_input("q", f, dims(&[b, h, s, d])).unwrap();
    let kt = g.add_input("kt", f, dims(&[b, h, d, s])).unwrap();
    let v = g.add_input("v", f, dims(&[b, h, s, d])).unwrap();
    let mask = g.add_input("mask", f, dims(&[b, 1, 1, s])).unwrap();
    let c = |g: &mut Graph, name: &str, x: f64| {
        g.add_initializer(name, HostTensor::from_f64(f, vec![], &[x])).unwrap()
    };
    let sd = c(&mut g, "sqrt_d", (d as f64).sqrt());
    let zero = c(&mut g, "zero", 0.0);
    let shape = g.add_initializer(
        "shape",
        HostTensor::from_i64(vec![3], &[b as i64, s as i64, (h * d) as i64]),
    );
    let shape = shape.unwrap();
    let names = ["scores", "scaled", "masked", "probs", "guarded", "y", "yt", "out"];
    let [scores, scaled, masked, probs, guarded, y, yt, out] =
        names.map(|n| g.add_value(n, f, None).unwrap());
    let nan = g.add_value("nan", DType::Bool, None).unwrap();
    g.add_node("qk", Op::MatMul, vec![q, kt], vec![scores]);
    g.add_node("div", Op::Binary(BinaryOp::Div), vec![scores, sd], vec![scaled]);
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![mask, scaled], vec![masked]);
    g.add_node("softmax", Op::Softmax { axis: -1 }, vec![masked], vec![probs]);
    g.add_node("isnan", Op::Unary(UnaryOp::IsNaN), vec![probs], vec![nan]);
    g.add_node("guard", Op::Where, vec![nan, zero, probs], vec![guarded]);
    g.add_node("pv", Op::MatMul, vec![guarded, v], vec![y]);
    g.add_node("tr", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, vec![y], vec![yt]);
    g.add_node("merge", Op::Reshape { allowzero: false }, vec![yt, shape], vec![out]);
    g.outputs = vec![out];
    g
}

fn feeds([b, h, s, d]: [usize; 4], place: Place) -> HashMap<String, Tensor> {
    let t = |shape: &[usize], v: Vec<f32>| Tensor::from_slice(&v, shape, Place::Cpu).unwrap();
    // Batch 1 pads its last 4 keys with -10000 (BERT's extended attention mask).
    let m: Vec<f32> =
        (0..b * s).map(|e| if e / s == 1 && e % s >= s - 4 { -10000.0 } else { 0.0 }).collect();
    [
        ("q", t(&[b, h, s, d], vals(b * h * s * d, 1))),
        ("kt", t(&[b, h, d, s], vals(b * h * s * d, 2))),
        ("v", t(&[b, h, s, d], vals(b * h * s * d, 3))),
        ("mask", t(&[b, 1, 1, s], m)),
    ]
    .into_iter()
    .map(|(n, x)| (n.to_string(), x.to(place).unwrap()))
    .collect()
}

/// Replayed dispatches and the output of a GPU session over `g` (the knob read at recording).
fn gpu_run(g: &Graph, shape: [usize; 4]) -> (usize, Vec<f64>) {
    let s = Session::from_graph(g.clone(), Place::Gpu(0), SessionOptions::default()).unwrap();
    let s = s.with_replay(true);
    let f = feeds(shape, Place::Gpu(0));
    let mut y = Vec::new();
    for _ in 0..3 {
        y = s.run(&f).unwrap()[0].1.to_f64_vec().unwrap();
    }
    let [b, h, sq, d] = shape;
    let st = s.replay_status(&[
        vec![b, h, sq, d],
        vec![b, h, d, sq],
        vec![b, h, sq, d],
        vec![b, 1, 1, sq],
    ]);
    let st = st.unwrap();
    assert!(st.starts_with("ready"), "{st}");
    let end = st.find(" dispatches,").unwrap_or_else(|| panic!("{st}"));
    (st[..end].rsplit(' ').next().unwrap().parse().unwrap(), y)
}

#[test]
fn seq_major_pv_matches_the_unfused_plan_and_drops_the_merge_copy() {
    for shape in [[2, 3, 32, 16], [2, 2, 20, 6]] {
        let g = graph(shape);
        let off = SessionOptions { fusion: false, ..SessionOptions::default() };
        let want = Session::from_graph(g.clone(), Place::Cpu, off).unwrap();
        let want = want.run(&feeds(shape, Place::Cpu)).unwrap()[0].1.to_f64_vec().unwrap();
        let close = |got: &[f64], what: &str| {
            assert_eq!(got.len(), want.len());
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(err < 2e-5, "{shape:?} {what}: max abs error {err}");
        };
        std::env::set_var("MPSRT_ATTENTION_F32_SEQ_MAJOR", "1");
        let cpu = Session::from_graph(g.clone(), Place::Cpu, SessionOptions::default()).unwrap();
        close(&cpu.run(&feeds(shape, Place::Cpu)).unwrap()[0].1.to_f64_vec().unwrap(), "cpu");
        if !mpsrt_runtime::gpu_available() {
            assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
            continue;
        }
        let (on, y) = gpu_run(&g, shape);
        close(&y, "gpu, seq-major");
        std::env::set_var("MPSRT_ATTENTION_F32_SEQ_MAJOR", "0");
        let (plain, y) = gpu_run(&g, shape);
        close(&y, "gpu, plain");
        assert_eq!(on + 1, plain, "{shape:?}: the merge copy should be gone");
    }
}
