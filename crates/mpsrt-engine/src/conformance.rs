//! Conformance runner: runs ONNX test cases laid out as `<case>/model.onnx` +
//! `<case>/test_data_set_N/{input,output}_i.pb` (ONNX's own layout; the node and light suites
//! are dumped by `tests/tools/dump_conformance.py`) and classifies each as pass / fail /
//! unsupported, comparing with ONNX's runner tolerances (rtol 1e-3, atol 1e-7).

use crate::session::{Session, SessionOptions};
use mpsrt_core::{DType, ErrorKind, Place, Result};
use mpsrt_graph::HostTensor;
use mpsrt_onnx::proto::TensorProto;
use mpsrt_tensor::Tensor;
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// ONNX backend runner tolerances.
pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-7;

/// The result of one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
    Excluded(String),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail(_) => "fail",
            Outcome::Unsupported(_) => "unsupported",
            Outcome::Excluded(_) => "excluded",
        }
    }
}

fn read_pb(path: &Path) -> Result<HostTensor> {
    let bytes = std::fs::read(path)
        .map_err(|e| mpsrt_core::Error::io("conformance", format!("{}: {e}", path.display())))?;
    let t = TensorProto::decode(&bytes[..]).map_err(|e| {
        mpsrt_core::Error::invalid("conformance", format!("{}: {e}", path.display()))
    })?;
    mpsrt_onnx::tensor::to_host(&t, None)
}

fn numbered(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        v.push(p);
    }
    v
}

fn close(got: f64, want: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= ATOL + RTOL * want.abs()
}

fn compare(name: &str, got: &Tensor, want: &HostTensor) -> std::result::Result<(), String> {
    if got.shape() != want.shape.as_slice() {
        return Err(format!("{name}: shape {:?}, expected {:?}", got.shape(), want.shape));
    }
    let g = got.to(Place::Cpu).and_then(|t| t.to_f64_vec()).map_err(|e| e.to_string())?;
    let w = want.to_f64_vec();
    if g.len() != w.len() {
        return Err(format!("{name}: {} values, expected {}", g.len(), w.len()));
    }
    let bad = g.iter().zip(&w).filter(|(a, b)| !close(**a, **b)).count();
    if let Some((i, (a, b))) = g.iter().zip(&w).enumerate().find(|(_, (a, b))| !close(**a, **b)) {
        return Err(format!(
            "{name}: {bad} of {} values differ; first at {i}: {a} vs {b}",
            g.len()
        ));
    }
    Ok(())
}

fn classify(e: mpsrt_core::Error) -> Outcome {
    if e.kind == ErrorKind::Unsupported {
        Outcome::Unsupported(e.to_string())
    } else {
        Outcome::Fail(e.to_string())
    }
}

fn run_case_inner(dir: &Path, place: Place) -> Outcome {
    if let Ok(reason) = std::fs::read_to_string(dir.join("UNSUPPORTED")) {
        return Outcome::Unsupported(reason.trim().to_string());
    }
    let session = match Session::load(dir.join("model.onnx"), place, SessionOptions::default()) {
        Ok(s) => s,
        Err(e) => return classify(e),
    };
    for k in 0.. {
        let ds = dir.join(format!("test_data_set_{k}"));
        if !ds.exists() {
            if k == 0 {
                return Outcome::Fail("no test_data_set_0".into());
            }
            break;
        }
        let mut feeds = HashMap::new();
        let inputs = numbered(&ds, "input");
        for (info, p) in session.inputs().iter().zip(&inputs) {
            let h = match read_pb(p) {
                Ok(h) => h,
                Err(e) => return classify(e),
            };
            let t = match Tensor::from_bytes(&h.bytes, h.dtype, &h.shape, Place::Cpu) {
                Ok(t) if place.is_gpu() && h.dtype.gpu_supported() => match t.to(place) {
                    Ok(t) => t,
                    Err(e) => return classify(e),
                },
                Ok(t) => t,
                Err(e) => return classify(e),
            };
            feeds.insert(info.name.clone(), t);
        }
        let outs = match session.run(&feeds) {
            Ok(o) => o,
            Err(e) => return classify(e),
        };
        let wants = numbered(&ds, "output");
        if wants.len() != outs.len() {
            return Outcome::Fail(format!("{} outputs, expected {}", outs.len(), wants.len()));
        }
        for ((name, got), p) in outs.iter().zip(&wants) {
            let want = match read_pb(p) {
                Ok(h) => h,
                Err(e) => return classify(e),
            };
            if want.dtype != got.dtype() && !(want.dtype == DType::F64 || got.dtype() == DType::F64)
            {
                return Outcome::Fail(format!(
                    "{name}: dtype {}, expected {}",
                    got.dtype(),
                    want.dtype
                ));
            }
            if let Err(m) = compare(name, got, &want) {
                return Outcome::Fail(m);
            }
        }
    }
    Outcome::Pass
}

/// Runs one case directory on `place`; panics are caught and reported as failures.
pub fn run_case(dir: &Path, place: Place) -> Outcome {
    match std::panic::catch_unwind(|| run_case_inner(dir, place)) {
        Ok(o) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(format!("panicked: {msg}"))
        }
    }
}

/// Exclusions: `case_name reason...` per line, `#` comments.
pub fn parse_exclusions(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((n, r)) => (n.to_string(), r.trim().to_string()),
            None => (l.to_string(), String::new()),
        })
        .collect()
}

/// Counts of one suite on one device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SuiteResult {
    pub pass: usize,
    pub fail: usize,
    pub unsupported: usize,
    pub excluded: usize,
    pub seconds: f64,
    pub cases: BTreeMap<String, Outcome>,
}

/// Runs every case under `suite_dir` (sorted; `filter` keeps names containing it).
pub fn run_suite(
    suite_dir: &Path,
    place: Place,
    exclusions: &BTreeMap<String, String>,
    filter: Option<&str>,
) -> Result<SuiteResult> {
    let t0 = std::time::Instant::now();
    let mut names: Vec<String> = std::fs::read_dir(suite_dir)
        .map_err(|e| mpsrt_core::Error::io("conformance", format!("{}: {e}", suite_dir.display())))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.onnx").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| filter.is_none_or(|f| n.contains(f)))
        .collect();
    names.sort();
    let mut r = SuiteResult::default();
    for name in names {
        let o = match exclusions.get(&name) {
            Some(reason) => Outcome::Excluded(reason.clone()),
            None => run_case(&suite_dir.join(&name), place),
        };
        match o {
            Outcome::Pass => r.pass += 1,
            Outcome::Fail(_) => r.fail += 1,
            Outcome::Unsupported(_) => r.unsupported += 1,
            Outcome::Excluded(_) => r.excluded += 1,
        }
        r.cases.insert(name, o);
    }
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}
