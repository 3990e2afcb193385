//! Native Vulkan replay (issue 22; `mpsrt-runtime/src/replay/native*.rs`) on the GPU — lavapipe
//! in CI, a real Vulkan driver, so the native path runs for real; skipped without an adapter
//! unless `MPSRT_REQUIRE_GPU=1`. A plan replayed from its pre-recorded Vulkan command buffer
//! gives bit-identical outputs to the wgpu replay and to a session that runs every step, over
//! many runs with new data; a new input shape gets its own plan; dropping a session whose
//! native work may still be running is safe; `MPSRT_REPLAY_NATIVE` / `set_replay_native`
//! switch paths between runs of one recording.

use mpsrt_core::DType;
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{Dim, Graph, Op, PoolAttrs, UnaryOp};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;

mod common;
use common::{gpu, B, GPU};

/// The tests switch the device's native path on and off: one at a time.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Conv 3→8 (3×3) + Relu, max pool, a depthwise 3×3 conv, concat with the pool, a 1×1 conv,
/// global average pool, flatten, a Gemm, and a CumSum over the classes (host-built index
/// data, uploaded in the run: copy commands in the recording).
fn conv_net() -> Graph {
    let mut b = B::new(0.5);
    let n = Dim::Sym("n".into());
    let dims = vec![n, Dim::Known(3), Dim::Known(12), Dim::Known(12)];
    let x = b.g.add_input("x", DType::F32, dims).unwrap();
    let c = b.conv(x, 3, 8, 3, 1);
    let r = b.node(Op::Unary(UnaryOp::Relu), vec![c]);
    let pool = PoolAttrs {
        kernel: vec![2, 2],
        strides: vec![2, 2],
        pads: vec![0; 4],
        dilations: vec![1, 1],
        ..Default::default()
    };
    let p = b.node(Op::MaxPool(pool), vec![r]);
    let d = b.conv(p, 8, 8, 3, 8);
    let cat = b.node(Op::Concat { axis: 1 }, vec![d, p]);
    let e = b.conv(cat, 16, 16, 1, 1);
    let gap = b.node(Op::GlobalAveragePool, vec![e]);
    let f = b.node(Op::Flatten { axis: 1 }, vec![gap]);
    let w = b.init(vec![10, 16], 0.77);
    let bias = b.init(vec![10], 0.5);
    let gemm = Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true };
    let y = b.node(gemm, vec![f, w, bias]);
    let axis = b.g.add_initializer("axis", mpsrt_graph::HostTensor::from_i64(vec![], &[1]));
    let cs = b.node(Op::CumSum { exclusive: false, reverse: false }, vec![y, axis.unwrap()]);
    b.g.outputs = vec![y, cs, d];
    b.g
}

fn input(n: usize, seed: u64) -> HashMap<String, Tensor> {
    let len = n * 3 * 12 * 12;
    let v: Vec<f32> = (0..len).map(|i| (i as f32 * 0.013 + seed as f32 * 0.7).sin()).collect();
    [("x".to_string(), Tensor::from_slice(&v, &[n, 3, 12, 12], GPU).unwrap())].into_iter().collect()
}

fn bytes(outs: &[(String, Tensor)]) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    outs.iter().map(|(n, t)| (n.clone(), t.shape().to_vec(), t.to_bytes().unwrap())).collect()
}

fn session(g: &Graph, replay: bool) -> Session {
    Session::from_graph(g.clone(), GPU, SessionOptions::default()).unwrap().with_replay(replay)
}

#[test]
fn native_replay_of_a_conv_net_is_bit_identical_to_wgpu_replay_and_a_fresh_plan() {
    if !gpu() {
        return;
    }
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let g = conv_net();
    let (native, wgpu, fresh) = (session(&g, true), session(&g, true), session(&g, false));
    let secondary = session(&g, true);
    let on = dev.replay_native();
    for (n, runs) in [(1usize, 6u64), (2, 4)] {
        for run in 0..runs {
            let f = input(n, 10 * n as u64 + run);
            let want = bytes(&fresh.run(&f).unwrap());
            // The prepared commands emitted into the run's own command buffer (direct), and
            // executed from a secondary buffer recorded once (the default).
            dev.set_replay_native(on);
            dev.set_replay_native_secondary(false);
            assert_eq!(bytes(&native.run(&f).unwrap()), want, "native, batch {n} run {run}");
            dev.set_replay_native_secondary(true);
            let got = bytes(&secondary.run(&f).unwrap());
            assert_eq!(got, want, "native secondary, batch {n} run {run}");
            dev.set_replay_native(false);
            assert_eq!(bytes(&wgpu.run(&f).unwrap()), want, "wgpu, batch {n} run {run}");
            dev.set_replay_native(on);
        }
        let shapes = [vec![n, 3, 12, 12]];
        let st = native.replay_status(&shapes).unwrap();
        assert!(st.starts_with("ready"), "batch {n}: {st}");
        if on {
            assert!(st.contains("path native"), "batch {n}: {st}");
        }
        let st = wgpu.replay_status(&shapes).unwrap();
        assert!(st.ends_with("path wgpu"), "batch {n}: {st}");
        // The CumSum's host-built data is uploaded in the run: the recording has copies.
        let (d, c) = counts(&st);
        assert!(c > d, "no copy command in the recording: {st}");
    }
}

/// (dispatches, commands) of a `replay_status` line.
fn counts(st: &str) -> (usize, usize) {
    let num = |key: &str| -> usize {
        let before = st.split(key).next().unwrap();
        before.rsplit([' ', ':']).find(|w| !w.is_empty()).unwrap().parse().unwrap()
    };
    (num(" dispatches"), num(" commands"))
}

#[test]
fn fifty_native_replays_stay_correct_and_paths_switch_between_runs() {
    if !gpu() {
        return;
    }
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let on = dev.replay_native();
    let g = conv_net();
    let (s, fresh) = (session(&g, true), session(&g, false));
    for run in 0..50u64 {
        // Every 10th replay goes through wgpu, every 5th emits the commands directly: one
        // recording serves every path.
        dev.set_replay_native(on && run % 10 != 7);
        dev.set_replay_native_secondary(run % 5 != 3);
        let f = input(1, 500 + run);
        let got = bytes(&s.run(&f).unwrap());
        assert_eq!(got, bytes(&fresh.run(&f).unwrap()), "run {run}");
    }
    dev.set_replay_native(on);
    dev.set_replay_native_secondary(true);
}

#[test]
fn dropping_a_session_while_its_native_replay_runs_is_safe() {
    if !gpu() {
        return;
    }
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let g = conv_net();
    let fresh = session(&g, false);
    let mut kept = Vec::new();
    for k in 0..3u64 {
        let s = session(&g, true);
        for run in 0..3 {
            // Runs 0 and 1 record; run 2 is replayed and flushed, not waited for.
            let f = input(1, 900 + 10 * k + run);
            kept.push((f.clone(), s.run(&f).unwrap()));
        }
        // The recording (and its native command buffers) go while the GPU may still run them.
        drop(s);
    }
    for (f, outs) in &kept {
        assert_eq!(bytes(outs), bytes(&fresh.run(f).unwrap()));
    }
    dev.synchronize().unwrap();
}

#[test]
fn two_threads_with_own_and_shared_sessions_stay_apart_on_the_native_path() {
    if !gpu() {
        return;
    }
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let g = conv_net();
    let fresh = session(&g, false);
    let want: Vec<_> = (0..8u64).map(|k| bytes(&fresh.run(&input(1, 300 + k)).unwrap())).collect();
    let shared = session(&g, true);
    let own = [session(&g, true), session(&g, true)];
    std::thread::scope(|sc| {
        for (t, own) in own.iter().enumerate() {
            let (want, shared) = (&want, &shared);
            sc.spawn(move || {
                for i in 0..4 {
                    let k = 2 * i + t;
                    let f = input(1, 300 + k as u64);
                    assert_eq!(bytes(&own.run(&f).unwrap()), want[k], "own, thread {t}");
                    assert_eq!(bytes(&shared.run(&f).unwrap()), want[k], "shared, thread {t}");
                }
            });
        }
    });
    for s in own.iter().chain([&shared]) {
        let st = s.replay_status(&[vec![1, 3, 12, 12]]).unwrap();
        assert!(st.starts_with("ready"), "{st}");
        if dev.replay_native() {
            assert!(st.contains("path native"), "{st}");
        }
    }
}
