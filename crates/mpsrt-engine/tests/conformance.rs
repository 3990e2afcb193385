//! Fails when conformance pass counts fall below `conformance/baseline.json`.
//!
//! Data: `MPSRT_CONFORMANCE_DIR` (default `target/onnx-conformance`), written by
//! `tests/tools/dump_conformance.py` (scripts/conformance.sh does it). Without the data the test
//! says so and passes, unless `MPSRT_REQUIRE_CONFORMANCE=1`. Suites listed in the baseline run on
//! the devices listed there; the GPU runs on lavapipe in CI (`MPSRT_REQUIRE_GPU=1` makes a missing
//! adapter a failure).

use mpsrt_core::Place;
use mpsrt_engine::conformance::{parse_exclusions, run_suite};
use std::path::PathBuf;

#[test]
fn conformance_not_below_baseline() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let baseline: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("conformance/baseline.json")).expect("baseline.json"),
    )
    .expect("baseline.json parses");
    let exclusions = parse_exclusions(
        &std::fs::read_to_string(root.join("conformance/exclusions.txt")).unwrap_or_default(),
    );
    let data = PathBuf::from(std::env::var("MPSRT_CONFORMANCE_DIR").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/onnx-conformance").into()
    }));
    if !data.exists() {
        assert!(
            std::env::var("MPSRT_REQUIRE_CONFORMANCE").as_deref() != Ok("1"),
            "no conformance data at {}; run scripts/conformance.sh",
            data.display()
        );
        eprintln!(
            "no conformance data at {}; skipping (run scripts/conformance.sh)",
            data.display()
        );
        return;
    }
    let ci_suites: Vec<String> = std::env::var("MPSRT_CONFORMANCE_SUITES")
        .unwrap_or_else(|_| "node".into())
        .split(',')
        .map(String::from)
        .collect();
    let mut failures = Vec::new();
    let Some(entries) = baseline.as_object() else { panic!("baseline must be an object") };
    for (key, want) in entries {
        let Some((suite, dev)) = key.split_once('/') else { continue };
        if !ci_suites.iter().any(|s| s == suite) {
            continue;
        }
        let place = if dev == "gpu" { Place::Gpu(0) } else { Place::Cpu };
        if place.is_gpu() && !mpsrt_runtime::gpu_available() {
            assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
            continue;
        }
        let r = run_suite(&data.join(suite), place, &exclusions, None).expect("suite runs");
        let min = want["pass"].as_u64().unwrap_or(0) as usize;
        eprintln!(
            "{key}: pass {} (baseline {min}), fail {}, unsupported {}, {:.1} s",
            r.pass, r.fail, r.unsupported, r.seconds
        );
        if r.pass < min {
            failures.push(format!("{key}: {} passes, baseline {min}", r.pass));
        }
    }
    assert!(failures.is_empty(), "conformance regressed: {failures:?}");
}
