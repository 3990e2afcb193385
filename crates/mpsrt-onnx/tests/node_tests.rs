//! ONNX backend node tests as an import + shape-inference check. The cases are dumped by
//! `tests/tools/dump_node_tests.py OUT_DIR`; point `MPSRT_ONNX_NODE_DIR` at OUT_DIR to run
//! (skipped with a message otherwise). For every case that imports, the plan for the test's
//! input shapes must reproduce the reference output shapes and dtypes; unsupported ops are
//! counted, not failed, and the summary is printed (`--nocapture`).

use mpsrt_core::{DType, ErrorKind};
use mpsrt_graph::{CompiledGraph, HostTensor, PlanOptions};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Default)]
struct Tally {
    passed: usize,
    unsupported: BTreeMap<String, usize>,
    load_errors: Vec<String>,
    plan_errors: Vec<String>,
    mismatches: Vec<String>,
}

/// (name, dtype, shape) for each line of `shapes.txt` of the given kind; None if a value is not a tensor.
fn read_shapes(text: &str, kind: &str) -> Option<Vec<(String, String, Vec<usize>)>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(&format!("{kind} "))) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.get(2) == Some(&"nontensor") || parts.len() < 3 {
            return None;
        }
        out.push((
            parts[1].to_string(),
            parts[2].to_string(),
            parts[3..].iter().filter_map(|d| d.parse().ok()).collect(),
        ));
    }
    Some(out)
}

/// The mpsrt dtype a NumPy dtype name is imported as (after widening).
fn expected_dtype(np: &str) -> Option<DType> {
    match np {
        "int16" | "uint16" => Some(DType::I32),
        "uint32" | "uint64" => Some(DType::I64),
        other => other.parse().ok(),
    }
}

trait WithI64 {
    fn with_i64(self, v: &[i64]) -> HostTensor;
}

impl WithI64 for HostTensor {
    /// Exact integer contents (int64 bounds like INT64_MAX do not survive a trip through f64).
    fn with_i64(self, v: &[i64]) -> HostTensor {
        let bytes = match self.dtype {
            DType::I64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
            d => {
                HostTensor::from_f64(
                    d,
                    self.shape.clone(),
                    &v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                )
                .bytes
            }
        };
        HostTensor { bytes, ..self }
    }
}

fn run_case(dir: &Path, t: &mut Tally) {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let (Ok(bytes), Ok(text)) =
        (std::fs::read(dir.join("model.onnx")), std::fs::read_to_string(dir.join("shapes.txt")))
    else {
        return;
    };
    let model = match mpsrt_onnx::load_bytes_with_dir(&bytes, Some(dir)) {
        Ok(m) => m,
        Err(e) if e.kind == ErrorKind::Unsupported => {
            let key = e
                .message
                .split(": ")
                .last()
                .unwrap_or("")
                .split(" \u{d7}")
                .next()
                .unwrap_or("")
                .to_string();
            *t.unsupported.entry(format!("{} ({})", key, e.op)).or_default() += 1;
            return;
        }
        Err(e) => return t.load_errors.push(format!("{name}: {e}")),
    };
    let (Some(ins), Some(outs)) = (read_shapes(&text, "in"), read_shapes(&text, "out")) else {
        *t.unsupported.entry("non-tensor values".into()).or_default() += 1;
        return;
    };
    let g = &model.graph;
    let mut shapes = Vec::new();
    for &i in &g.inputs {
        match ins.iter().find(|(n, _, _)| *n == g.value(i).name) {
            Some((_, _, s)) => shapes.push(s.clone()),
            None => {
                return t
                    .load_errors
                    .push(format!("{name}: no test data for input {:?}", g.value(i).name))
            }
        }
    }
    // Inputs whose values decide shapes get them from the test data.
    let plan = CompiledGraph::new(model.graph.clone(), PlanOptions::default()).and_then(|c| {
        let mut values = Vec::new();
        for &i in c.value_inputs() {
            let v = c.graph().value(c.graph().inputs[i]);
            let prefix = format!("val {} ", v.name);
            let Some(line) = text.lines().map(|l| format!("{l} ")).find(|l| l.starts_with(&prefix))
            else {
                return Err(mpsrt_core::Error::invalid(
                    "test",
                    format!("no values for {:?}", v.name),
                ));
            };
            let nums: Vec<&str> = line[prefix.len()..].split_whitespace().collect();
            values.push(if v.dtype.is_float() {
                HostTensor::from_f64(
                    v.dtype,
                    shapes[i].clone(),
                    &nums.iter().map(|x| x.parse().unwrap_or(0.0)).collect::<Vec<f64>>(),
                )
            } else {
                let ints: Vec<i64> = nums.iter().map(|x| x.parse().unwrap_or(0)).collect();
                HostTensor::from_f64(v.dtype, shapes[i].clone(), &[]).with_i64(&ints)
            });
        }
        c.plan_with_values(&shapes, &values)
    });
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return t.plan_errors.push(format!("{name}: {e}")),
    };
    for (k, &o) in plan.graph.outputs.iter().enumerate() {
        let Some((_, dt, want)) = outs.get(k) else { continue };
        let got = plan.shape(o);
        let got_dt = plan.graph.value(o).dtype;
        if got != *want || expected_dtype(dt).is_some_and(|d| d != got_dt) {
            return t
                .mismatches
                .push(format!("{name}: output {k} is {got_dt} {got:?}, reference {dt} {want:?}"));
        }
    }
    t.passed += 1;
}

#[test]
fn node_tests_import_and_infer() {
    let Some(root) = std::env::var_os("MPSRT_ONNX_NODE_DIR") else {
        println!("SKIPPED: set MPSRT_ONNX_NODE_DIR (see tests/tools/dump_node_tests.py)");
        return;
    };
    let mut dirs: Vec<_> =
        std::fs::read_dir(root).unwrap().filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    let mut t = Tally::default();
    for d in &dirs {
        run_case(d, &mut t);
    }
    let unsupported: usize = t.unsupported.values().sum();
    println!(
        "node tests: {} cases, {} import+infer OK, {} unsupported, {} load errors, {} plan errors, {} shape/dtype mismatches",
        dirs.len(),
        t.passed,
        unsupported,
        t.load_errors.len(),
        t.plan_errors.len(),
        t.mismatches.len()
    );
    let mut top: Vec<_> = t.unsupported.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1));
    println!("unsupported (first op type per model): {top:?}");
    for line in t.load_errors.iter().chain(&t.plan_errors).chain(&t.mismatches) {
        println!("  {line}");
    }
    assert!(t.mismatches.is_empty(), "shape inference disagrees with the reference outputs");
}
