//! Plan replay (issue 22) on the GPU (lavapipe in CI; skipped without an adapter unless
//! `MPSRT_REQUIRE_GPU=1`): a replayed plan gives bit-identical outputs to a session that runs
//! every step (replay off), with new input data on every run; a new input shape gets its own
//! plan and recording; concurrent sessions, and one session shared by two threads, keep their
//! inputs and outputs apart.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, HostTensor, Op, UnaryOp};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::path::PathBuf;

const GPU: Place = Place::Gpu(0);

fn gpu() -> bool {
    let ok = mpsrt_runtime::gpu_available();
    assert!(ok || std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    ok
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

const VOCAB: usize = 50;
const HIDDEN: usize = 16;

/// A BERT-like block: int64 token ids → embedding Gather, LayerNorm, Q/K/V projections,
/// softmax(Q·Kᵀ·scale)·V, residual add, GELU, and a transposed second output (a view).
fn bert_like() -> Graph {
    let mut g = Graph::new();
    let seq = Dim::Sym("seq".into());
    let ids = g.add_input("ids", DType::I64, vec![Dim::Known(1), seq.clone()]).unwrap();
    let bias = g.add_input("bias", DType::F32, vec![Dim::Known(1), seq, Dim::Known(HIDDEN)]);
    let bias = bias.unwrap();
    let init = |g: &mut Graph, name: &str, shape: Vec<usize>, seed: u64| {
        let n = shape.iter().product();
        g.add_initializer(name, HostTensor::from_f32(shape, &values(n, seed))).unwrap()
    };
    let emb = init(&mut g, "emb", vec![VOCAB, HIDDEN], 1);
    let gamma = init(&mut g, "gamma", vec![HIDDEN], 2);
    let beta = init(&mut g, "beta", vec![HIDDEN], 3);
    let wq = init(&mut g, "wq", vec![HIDDEN, HIDDEN], 4);
    let wk = init(&mut g, "wk", vec![HIDDEN, HIDDEN], 5);
    let wv = init(&mut g, "wv", vec![HIDDEN, HIDDEN], 6);
    let scale = g.add_initializer("scale", HostTensor::from_f32(vec![], &[0.25])).unwrap();
    let mut v = |name: &str| g.add_value(name, DType::F32, None).unwrap();
    let (x0, x, ln, q, k, vv, kt, s0, s, p, c, r, y, yt) = (
        v("x0"),
        v("x"),
        v("ln"),
        v("q"),
        v("k"),
        v("v"),
        v("kt"),
        v("s0"),
        v("s"),
        v("p"),
        v("c"),
        v("r"),
        v("y"),
        v("yt"),
    );
    g.add_node("embed", Op::Gather { axis: 0 }, vec![emb, ids], vec![x0]);
    g.add_node("pos", Op::Binary(BinaryOp::Add), vec![x0, bias], vec![x]);
    g.add_node(
        "ln",
        Op::LayerNormalization { axis: -1, epsilon: 1e-5 },
        vec![x, gamma, beta],
        vec![ln],
    );
    g.add_node("q", Op::MatMul, vec![ln, wq], vec![q]);
    g.add_node("k", Op::MatMul, vec![ln, wk], vec![k]);
    g.add_node("v", Op::MatMul, vec![ln, wv], vec![vv]);
    g.add_node("kt", Op::Transpose { perm: Some(vec![0, 2, 1]) }, vec![k], vec![kt]);
    g.add_node("qk", Op::MatMul, vec![q, kt], vec![s0]);
    g.add_node("scale", Op::Binary(BinaryOp::Mul), vec![s0, scale], vec![s]);
    g.add_node("softmax", Op::Softmax { axis: -1 }, vec![s], vec![p]);
    g.add_node("pv", Op::MatMul, vec![p, vv], vec![c]);
    g.add_node("res", Op::Binary(BinaryOp::Add), vec![c, x], vec![r]);
    g.add_node("gelu", Op::Gelu { approximate_tanh: false }, vec![r], vec![y]);
    g.add_node("yt", Op::Transpose { perm: Some(vec![0, 2, 1]) }, vec![y], vec![yt]);
    // Also a unary output computed from the input directly.
    let a = g.add_value("absbias", DType::F32, None).unwrap();
    g.add_node("abs", Op::Unary(UnaryOp::Abs), vec![bias], vec![a]);
    g.outputs = vec![y, yt, a];
    g
}

/// Token ids on the host (int64, like a tokenizer's output) and a GPU float input.
fn bert_feeds(seq: usize, seed: u64) -> HashMap<String, Tensor> {
    let ids: Vec<i64> = values(seq, seed).iter().map(|v| ((v + 1.0) * 24.9) as i64).collect();
    let ids = Tensor::from_slice(&ids, &[1, seq], Place::Cpu).unwrap();
    let bias = Tensor::from_slice(&values(seq * HIDDEN, seed + 7), &[1, seq, HIDDEN], GPU);
    [("ids".to_string(), ids), ("bias".to_string(), bias.unwrap())].into_iter().collect()
}

fn bytes(outs: &[(String, Tensor)]) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    outs.iter().map(|(n, t)| (n.clone(), t.shape().to_vec(), t.to_bytes().unwrap())).collect()
}

fn sessions(g: Graph) -> (Session, Session) {
    let replayed = Session::from_graph(g.clone(), GPU, SessionOptions::default()).unwrap();
    let fresh = Session::from_graph(g, GPU, SessionOptions::default()).unwrap().with_replay(false);
    (replayed.with_replay(true), fresh)
}

#[test]
fn bert_like_replay_is_bit_identical_to_step_by_step() {
    if !gpu() {
        return;
    }
    // The tests that turn native replay off hold `SPLIT`: with it held, a Vulkan adapter's
    // replays here run native (the live Gather splits the plan into two native segments).
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let _split = SPLIT.lock().unwrap_or_else(|e| e.into_inner());
    let native = dev.replay_native();
    let (s, fresh) = sessions(bert_like());
    let shapes = vec![vec![1, 5], vec![1, 5, HIDDEN]];
    for run in 0..4u64 {
        let f = bert_feeds(5, run);
        let want = bytes(&fresh.run(&f).unwrap());
        let got = bytes(&s.run(&f).unwrap());
        assert_eq!(got, want, "run {run}");
        if run >= 1 {
            let st = s.replay_status(&shapes).unwrap();
            assert!(st.starts_with("ready"), "run {run}: {st}");
        }
    }
    assert_eq!(fresh.replay_status(&shapes).unwrap(), "not recorded yet");
    if native {
        let st = s.replay_status(&shapes).unwrap();
        assert!(st.contains("path native"), "{st}");
    }
}

#[test]
fn a_new_input_shape_gets_its_own_plan_and_recording() {
    if !gpu() {
        return;
    }
    let (s, fresh) = sessions(bert_like());
    for (run, seq) in [3usize, 3, 3, 7, 7, 7, 3, 7, 4].into_iter().enumerate() {
        let f = bert_feeds(seq, 100 + run as u64);
        let want = bytes(&fresh.run(&f).unwrap());
        assert_eq!(bytes(&s.run(&f).unwrap()), want, "run {run}, seq {seq}");
    }
    for seq in [3, 7] {
        let st = s.replay_status(&[vec![1, seq], vec![1, seq, HIDDEN]]).unwrap();
        assert!(st.starts_with("ready"), "seq {seq}: {st}");
    }
    let st = s.replay_status(&[vec![1, 4], vec![1, 4, HIDDEN]]).unwrap();
    assert_eq!(st, "not recorded yet");
}

#[test]
fn concurrent_sessions_and_threads_keep_inputs_and_outputs_apart() {
    if !gpu() {
        return;
    }
    let (_, fresh) = sessions(bert_like());
    let seeds: Vec<u64> = (0..12).collect();
    let want: Vec<_> =
        seeds.iter().map(|&k| bytes(&fresh.run(&bert_feeds(6, k)).unwrap())).collect();
    let shared = Session::from_graph(bert_like(), GPU, SessionOptions::default()).unwrap();
    let own: Vec<Session> = (0..2)
        .map(|_| Session::from_graph(bert_like(), GPU, SessionOptions::default()).unwrap())
        .collect();
    std::thread::scope(|sc| {
        for (t, own) in own.iter().enumerate() {
            let (want, shared) = (&want, &shared);
            sc.spawn(move || {
                for i in 0..6 {
                    // Thread 0 takes the even inputs, thread 1 the odd ones.
                    let k = 2 * i + t;
                    let f = bert_feeds(6, k as u64);
                    assert_eq!(bytes(&own.run(&f).unwrap()), want[k], "own session, thread {t}");
                    assert_eq!(bytes(&shared.run(&f).unwrap()), want[k], "shared, thread {t}");
                }
            });
        }
    });
    let shapes = [vec![1, 6], vec![1, 6, HIDDEN]];
    for s in own.iter().chain([&shared]) {
        assert!(s.replay_status(&shapes).unwrap().starts_with("ready"));
    }
}

fn light_model(name: &str) -> Option<PathBuf> {
    let dir = std::env::var("MPSRT_CONFORMANCE_DIR").map(PathBuf::from).unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/onnx-conformance").into()
    });
    let p = dir.join("light").join(format!("light_{name}")).join("model.onnx");
    if !p.exists() {
        eprintln!("skipping {name}: {} not found (scripts/conformance.sh writes it)", p.display());
        return None;
    }
    Some(p)
}

#[test]
fn squeezenet_replay_is_bit_identical_to_step_by_step() {
    if !gpu() {
        return;
    }
    let Some(path) = light_model("squeezenet") else { return };
    let s = Session::load(&path, GPU, SessionOptions::default()).unwrap().with_replay(true);
    let fresh = Session::load(&path, GPU, SessionOptions::default()).unwrap().with_replay(false);
    let info = &s.inputs()[0];
    let shape: Vec<usize> = info.shape.iter().map(|d| d.known().unwrap_or(1)).collect();
    let n = shape.iter().product();
    for run in 0..3u64 {
        let x = Tensor::from_slice(&values(n, 40 + run), &shape, GPU).unwrap();
        let f: HashMap<String, Tensor> = [(info.name.clone(), x)].into_iter().collect();
        let want = bytes(&fresh.run(&f).unwrap());
        assert_eq!(bytes(&s.run(&f).unwrap()), want, "run {run}");
    }
    let st = s.replay_status(&[shape]).unwrap();
    assert!(st.starts_with("ready"), "{st}");
}

#[test]
fn a_replay_recorded_on_several_threads_is_bit_identical() {
    if !gpu() {
        return;
    }
    // Parts of at least 2 commands over up to 3 threads: the BERT-like plan's recorded ranges
    // (before and after its live Gather) are each split into command buffers recorded in
    // parallel and submitted in order. The device setting is shared by this binary's other
    // tests, which then also replay split (they check bit-identity too).
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let _split = SPLIT.lock().unwrap_or_else(|e| e.into_inner());
    let _wgpu = WgpuPath::new(&dev);
    dev.set_replay_split(3, 2);
    let (s, fresh) = sessions(bert_like());
    let parts0 = dev.submit_timing().replay_parts;
    for run in 0..4u64 {
        let f = bert_feeds(9, 200 + run);
        assert_eq!(bytes(&s.run(&f).unwrap()), bytes(&fresh.run(&f).unwrap()), "run {run}");
    }
    let st = s.replay_status(&[vec![1, 9], vec![1, 9, HIDDEN]]).unwrap();
    assert!(st.starts_with("ready"), "{st}");
    assert_eq!(dev.replay_split(), (3, 2));
    assert!(dev.submit_timing().replay_parts > parts0, "no replay was recorded in parts");
}

/// The wgpu replay path (native Vulkan replay off) while alive: the tests of how wgpu replays
/// are split and submitted early assert on those paths' counters.
struct WgpuPath(std::sync::Arc<mpsrt_runtime::GpuDevice>, bool);

impl WgpuPath {
    fn new(dev: &std::sync::Arc<mpsrt_runtime::GpuDevice>) -> Self {
        let on = dev.replay_native();
        dev.set_replay_native(false);
        WgpuPath(dev.clone(), on)
    }
}

impl Drop for WgpuPath {
    fn drop(&mut self) {
        self.0.set_replay_native(self.1);
    }
}

/// Held by the tests that change how this device splits replays, which assert on it (the
/// other tests compare outputs only, whatever the split).
static SPLIT: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_replay_submitted_early_in_parts_is_bit_identical() {
    if !gpu() {
        return;
    }
    // Parts of 2, 4, 8, … commands submitted as soon as they are recorded (serial recording:
    // early submits do not apply to a replay recorded on several threads).
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let _split = SPLIT.lock().unwrap_or_else(|e| e.into_inner());
    let _wgpu = WgpuPath::new(&dev);
    let (threads, chunk) = dev.replay_split();
    dev.set_replay_split(1, chunk);
    dev.set_replay_early(2);
    let (s, fresh) = sessions(bert_like());
    let early0 = dev.submit_timing().replay_early_submits;
    for run in 0..4u64 {
        let f = bert_feeds(7, 400 + run);
        assert_eq!(bytes(&s.run(&f).unwrap()), bytes(&fresh.run(&f).unwrap()), "run {run}");
    }
    let st = s.replay_status(&[vec![1, 7], vec![1, 7, HIDDEN]]).unwrap();
    assert!(st.starts_with("ready"), "{st}");
    let early = dev.submit_timing().replay_early_submits - early0;
    // At most one early submit per replay (parts growing 8x): still bit-identical, and the
    // replays (runs 2 and 3; run 0 runs step by step, run 1 is captured) submit once each.
    let growth = dev.replay_early_growth();
    dev.set_replay_early_growth(8, 1);
    let (s1, fresh1) = sessions(bert_like());
    let t0 = dev.submit_timing();
    for run in 0..4u64 {
        let f = bert_feeds(7, 500 + run);
        assert_eq!(bytes(&s1.run(&f).unwrap()), bytes(&fresh1.run(&f).unwrap()), "run {run}");
    }
    let t = dev.submit_timing().since(&t0);
    dev.set_replay_early_growth(growth.0, growth.1);
    dev.set_replay_early(0);
    dev.set_replay_split(threads, chunk);
    assert!(early >= 2, "{early} early submits in two replays");
    // Each of the 2 replays has 2 recorded ranges (around the live Gather), one early each.
    assert!(t.replays >= 2 && t.replay_early_submits <= t.replays, "{t:?}");
    assert!(t.replay_early_submits >= 1, "{t:?}");
}

#[test]
fn profile_reports_host_and_gpu_time_per_step() {
    if !gpu() {
        return;
    }
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let (s, _) = sessions(bert_like());
    let f = bert_feeds(5, 300);
    for repeat in [1, 2] {
        let prof = s.profile(&f, repeat).unwrap();
        assert!(!prof.is_empty());
        for p in &prof {
            assert!(p.host_ms >= 0.0 && p.host_ms <= p.ms * repeat as f64 + 1e-3, "{p:?}");
            // Timestamps where the adapter has them (lavapipe does); never more than the
            // synchronized wall time of the step, within the two clocks' disagreement (the
            // GPU's timestamp ticks and the host's clock are read at different points: on a
            // loaded 2-core machine lavapipe's timestamps exceeded the wall time by a few µs).
            assert_eq!(p.gpu_ms.is_some(), dev.has_timestamps(), "{p:?}");
            if let Some(g) = p.gpu_ms {
                assert!(g >= 0.0 && g <= p.ms * 1.05 + 0.05, "repeat {repeat}: {p:?}");
            }
        }
    }
}

/// `depth` MatMul + Tanh layers on an `[8, 32]` input: no step reads an input on the host, so
/// each replay is one whole range (the adaptive early-submit policy applies).
fn mlp(depth: usize) -> Graph {
    let mut g = Graph::new();
    let mut x = g.add_input("x", DType::F32, vec![Dim::Known(8), Dim::Known(32)]).unwrap();
    for i in 0..depth {
        let w = values(32 * 32, 50 + i as u64).iter().map(|v| v * 0.3).collect::<Vec<_>>();
        let w = g.add_initializer(format!("w{i}"), HostTensor::from_f32(vec![32, 32], &w));
        let (m, t) = (g.add_value(format!("m{i}"), DType::F32, None).unwrap(), {
            g.add_value(format!("t{i}"), DType::F32, None).unwrap()
        });
        g.add_node(format!("mm{i}"), Op::MatMul, vec![x, w.unwrap()], vec![m]);
        g.add_node(format!("tanh{i}"), Op::Unary(UnaryOp::Tanh), vec![m], vec![t]);
        x = t;
    }
    g.outputs = vec![x];
    g
}

#[test]
fn adaptive_early_submits_learn_the_gpu_time_and_stay_bit_identical() {
    if !gpu() {
        return;
    }
    // Early parts sized from the GPU time per command learnt on the previous replay (the first
    // replay doubles): whatever the parts, the outputs equal a fresh plan's.
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let _split = SPLIT.lock().unwrap_or_else(|e| e.into_inner());
    let _wgpu = WgpuPath::new(&dev);
    let (threads, chunk) = dev.replay_split();
    let (early, adapt) = (dev.replay_early(), dev.replay_early_adapt());
    dev.set_replay_split(1, chunk);
    dev.set_replay_early(2);
    dev.set_replay_early_adapt(true);
    let (s, fresh) = sessions(mlp(12));
    let t0 = dev.submit_timing();
    for run in 0..6u64 {
        let x = Tensor::from_slice(&values(8 * 32, 600 + run), &[8, 32], GPU).unwrap();
        let f: HashMap<String, Tensor> = [("x".to_string(), x)].into_iter().collect();
        let got = bytes(&s.run(&f).unwrap());
        assert_eq!(got, bytes(&fresh.run(&f).unwrap()), "run {run}");
        dev.synchronize().unwrap();
    }
    let t = dev.submit_timing().since(&t0);
    dev.set_replay_early(early);
    dev.set_replay_early_adapt(adapt);
    dev.set_replay_split(threads, chunk);
    assert!(s.replay_status(&[vec![8, 32]]).unwrap().starts_with("ready"));
    // Four replays (runs 2-5), each submitting its first part early.
    assert!(t.replays >= 4 && t.replay_early_submits >= 4, "{t:?}");
}

#[test]
fn a_replay_with_a_threaded_tail_is_bit_identical() {
    if !gpu() {
        return;
    }
    // The calling thread records the head with early submits while two pool threads record and
    // finish the last 60% of the commands (`MPSRT_REPLAY_TAIL`): the parts reach the GPU in
    // order, so the outputs equal a fresh plan's on every run.
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let _split = SPLIT.lock().unwrap_or_else(|e| e.into_inner());
    let _wgpu = WgpuPath::new(&dev);
    let (threads, chunk) = dev.replay_split();
    let (early, tail, adapt) = (dev.replay_early(), dev.replay_tail(), dev.replay_early_adapt());
    dev.set_replay_split(1, 8);
    dev.set_replay_early(2);
    // Without the learnt GPU time (lavapipe's ~tens of µs per command would turn tails off as
    // for batch-32 runs), every replay takes the tail.
    dev.set_replay_early_adapt(false);
    dev.set_replay_tail(2, 60, 8);
    let (s, fresh) = sessions(mlp(40));
    let t0 = dev.submit_timing();
    for run in 0..5u64 {
        let x = Tensor::from_slice(&values(8 * 32, 700 + run), &[8, 32], GPU).unwrap();
        let f: HashMap<String, Tensor> = [("x".to_string(), x)].into_iter().collect();
        assert_eq!(bytes(&s.run(&f).unwrap()), bytes(&fresh.run(&f).unwrap()), "run {run}");
    }
    let t = dev.submit_timing().since(&t0);
    dev.set_replay_tail(tail.0, tail.1, tail.2);
    dev.set_replay_early_adapt(adapt);
    dev.set_replay_early(early);
    dev.set_replay_split(threads, chunk);
    assert!(s.replay_status(&[vec![8, 32]]).unwrap().starts_with("ready"));
    // Three replays (runs 2-4), each with two tail parts.
    assert!(t.replays >= 3 && t.replay_parts >= 6, "{t:?}");
}
