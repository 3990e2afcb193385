//! Conformance runner CLI: `cargo run --release -p mpsrt-engine --example conformance -- DIR
//! [--suite node|light ...] [--device cpu|gpu ...] [--filter S] [--json OUT] [--verbose]`.
//! DIR holds `<suite>/<case>/` folders written by `tests/tools/dump_conformance.py` (suites: node,
//! light, simple, pytorch-operator, pytorch-converted).

use mpsrt_core::Place;
use mpsrt_engine::conformance::{parse_exclusions, run_suite, Outcome};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut dir = None;
    let mut suites = Vec::new();
    let mut devices = Vec::new();
    let (mut filter, mut json, mut verbose) = (None, None, false);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--suite" => suites.extend(it.next()),
            "--device" => devices.extend(it.next()),
            "--filter" => filter = it.next(),
            "--json" => json = it.next().map(PathBuf::from),
            "--verbose" => verbose = true,
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: conformance DIR [--suite node|light] [--device cpu|gpu] [--filter S] [--json OUT]");
        std::process::exit(2);
    };
    if suites.is_empty() {
        suites = ["node", "light", "simple", "pytorch-operator", "pytorch-converted"]
            .map(String::from)
            .to_vec();
    }
    if devices.is_empty() {
        devices = vec!["cpu".into(), "gpu".into()];
    }
    let excl_path = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/exclusions.txt");
    let exclusions = parse_exclusions(&std::fs::read_to_string(excl_path).unwrap_or_default());
    let mut report = serde_json::Map::new();
    for suite in &suites {
        for dev in &devices {
            let place = if dev == "gpu" { Place::Gpu(0) } else { Place::Cpu };
            if place.is_gpu() && !mpsrt_runtime::gpu_available() {
                eprintln!("{suite}/{dev}: no GPU adapter, skipped");
                continue;
            }
            let r = match run_suite(&dir.join(suite), place, &exclusions, filter.as_deref()) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{suite}/{dev}: {e}");
                    std::process::exit(1);
                }
            };
            println!(
                "{suite:6} {dev:4} pass {:5}  fail {:5}  unsupported {:5}  excluded {:3}  ({:.1} s)",
                r.pass, r.fail, r.unsupported, r.excluded, r.seconds
            );
            let mut cases = serde_json::Map::new();
            for (name, o) in &r.cases {
                let detail = match o {
                    Outcome::Pass => String::new(),
                    Outcome::Fail(m) | Outcome::Unsupported(m) | Outcome::Excluded(m) => m.clone(),
                };
                if verbose && !matches!(o, Outcome::Pass) {
                    println!("  {name}: {} {}", o.label(), detail.lines().next().unwrap_or(""));
                }
                cases.insert(name.clone(), serde_json::json!([o.label(), detail]));
            }
            report.insert(
                format!("{suite}/{dev}"),
                serde_json::json!({
                    "pass": r.pass, "fail": r.fail, "unsupported": r.unsupported,
                    "excluded": r.excluded, "seconds": r.seconds, "cases": cases,
                }),
            );
        }
    }
    if let Some(p) = json {
        let text =
            serde_json::to_string_pretty(&serde_json::Value::Object(report)).unwrap_or_default();
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("cannot write {}: {e}", p.display());
            std::process::exit(1);
        }
    }
}
