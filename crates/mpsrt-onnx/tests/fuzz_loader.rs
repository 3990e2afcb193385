//! The loader must return an error, never panic, on truncated or corrupted files. Byte-level
//! mutations of real models (built with prost here, plus the small ONNX light models when the
//! `onnx` package is available, and every 10th dumped node-test model when `MPSRT_ONNX_NODE_DIR`
//! is set) are fed to `load_bytes` and, when loading succeeds, through specialization and planning
//! too. Case counts are bounded to run in a few seconds (`MPSRT_FUZZ_CASES` for longer runs).

mod common;

use mpsrt_graph::{CompiledGraph, PlanOptions};
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many mutated inputs still loaded: shows the deeper import/inference paths were reached.
static LOADED: AtomicUsize = AtomicUsize::new(0);

/// Case count: small by default (CI), `MPSRT_FUZZ_CASES` for longer local runs.
fn cases() -> u32 {
    std::env::var("MPSRT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
}

/// Loads and, if that works, plans with the declared input shapes (symbols set to 2).
fn exercise(bytes: &[u8]) {
    let Ok(model) = mpsrt_onnx::load_bytes(bytes) else { return };
    LOADED.fetch_add(1, Ordering::Relaxed);
    let shapes: Vec<Vec<usize>> = model
        .graph
        .inputs
        .iter()
        .map(|&i| {
            let s = model.graph.value(i).shape.clone().unwrap_or_default();
            s.iter().map(|d| d.known().unwrap_or(2)).collect()
        })
        .collect();
    if let Ok(c) = CompiledGraph::new(model.graph, PlanOptions::default()) {
        let _ = c.plan(&shapes);
    }
}

fn corpus() -> &'static Vec<Vec<u8>> {
    static C: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    C.get_or_init(|| {
        let mut v = vec![common::bytes(&common::small_cnn())];
        // Small light models, if the onnx package can be found (same lookup as light_models.rs).
        if let Some(d) = std::env::var_os("MPSRT_ONNX_DATA") {
            let dir = std::path::PathBuf::from(d).join("backend/test/data/light");
            for name in ["light_bvlc_alexnet.onnx", "light_zfnet512.onnx"] {
                if let Ok(b) = std::fs::read(dir.join(name)) {
                    v.push(b);
                }
            }
        }
        // Every 10th ONNX node-test model, when dumped (see node_tests.rs): many op shapes.
        if let Some(d) = std::env::var_os("MPSRT_ONNX_NODE_DIR") {
            if let Ok(rd) = std::fs::read_dir(d) {
                let mut dirs: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                dirs.sort();
                v.extend(
                    dirs.iter()
                        .step_by(10)
                        .filter_map(|p| std::fs::read(p.join("model.onnx")).ok()),
                );
            }
        }
        v
    })
}

#[test]
fn every_truncation_of_a_small_model_is_an_error_not_a_panic() {
    let bytes = common::bytes(&common::small_cnn());
    for len in 0..bytes.len() {
        exercise(&bytes[..len]);
    }
    exercise(&bytes);
    assert!(mpsrt_onnx::load_bytes(&bytes).is_ok());
    assert!(mpsrt_onnx::load_bytes(&bytes[..bytes.len() / 2]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_mutations_never_panic(
        pick in 0usize..1000,
        muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in proptest::bool::weighted(0.2),
    ) {
        let models = corpus();
        let mut bytes = models[pick % models.len()].clone();
        for (at, val, kind) in muts {
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = val,
                1 => bytes[i] ^= 1 << (val % 8),
                _ => bytes.insert(i, val),
            }
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        exercise(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Structure-aware mutations: valid protobuf with hostile attribute values, dims and input
    /// wiring, to reach shape inference, folding and planning with nonsense.
    #[test]
    fn hostile_attributes_and_dims_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), -4i64..300, 0u8..6), 1..4),
    ) {
        let mut m = common::small_cnn();
        let g = m.graph.as_mut().unwrap();
        for (a, b, val, kind) in edits {
            match kind {
                0 => {
                    let n = a.get_mut(&mut g.node);
                    if !n.attribute.is_empty() {
                        let at = b.get_mut(&mut n.attribute);
                        at.i = Some(val);
                        for x in at.ints.iter_mut() { *x = val; }
                    }
                }
                1 => {
                    let t = a.get_mut(&mut g.initializer);
                    if !t.dims.is_empty() { *b.get_mut(&mut t.dims) = val; }
                    for x in t.int64_data.iter_mut() { *x = val; }
                }
                2 => {
                    let n = a.get_mut(&mut g.node);
                    let names: Vec<String> = ["x", "w", "p", "sh", "target", "zero", ""].iter().map(|s| s.to_string()).collect();
                    if !n.input.is_empty() { *b.get_mut(&mut n.input) = names[(val.unsigned_abs() as usize) % names.len()].clone(); }
                }
                4 => {
                    // Nodes without (named) outputs, or with extra ones.
                    let n = a.get_mut(&mut g.node);
                    if val % 2 == 0 { n.output.iter_mut().for_each(|o| o.clear()) } else { n.output.push(format!("extra{val}")) }
                }
                _ => {
                    let n = a.get_mut(&mut g.node);
                    n.attribute.push(common::ais(["axis", "perm", "kernel_shape", "pads", "strides", "group"][b.index(6)], &[val, val]));
                }
            }
        }
        exercise(&common::bytes(&m));
    }
}

#[test]
fn report_how_many_mutations_loaded() {
    // Runs after (or alongside) the proptest in the same binary; informational only.
    println!(
        "mutated/truncated inputs that loaded successfully so far: {}",
        LOADED.load(Ordering::Relaxed)
    );
}
