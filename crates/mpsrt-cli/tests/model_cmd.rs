//! `mpsrt run` and `mpsrt bench MODEL.onnx` as a user runs them: the built binary on the example
//! repository's `simple` model (INT32 add/sub) with `.npy` inputs, outputs read back from the
//! `.npz` and compared with values computed here; errors for a wrong input name.

use npyz::WriterBuilder;
use std::path::{Path, PathBuf};
use std::process::Command;

fn mpsrt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mpsrt"))
}

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/model_repository/simple/1/model.onnx")
}

fn write_i32(path: &Path, shape: &[u64], data: &[i32]) {
    let mut f = std::fs::File::create(path).unwrap();
    let mut w =
        npyz::WriteOptions::new().default_dtype().shape(shape).writer(&mut f).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

fn read_npz_i32(path: &Path, name: &str) -> Vec<i32> {
    let mut npz = npyz::npz::NpzArchive::open(path).unwrap();
    let arr = npz.by_name(name).unwrap().unwrap_or_else(|| panic!("{name} missing"));
    arr.into_vec::<i32>().unwrap()
}

#[test]
fn run_writes_the_outputs_of_simple_on_each_device() {
    let dir = std::env::temp_dir().join(format!("mpsrt-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a: Vec<i32> = (0..32).map(|i| i * 3 - 40).collect();
    let b: Vec<i32> = (0..32).map(|i| 7 - i).collect();
    write_i32(&dir.join("a.npy"), &[2, 16], &a);
    write_i32(&dir.join("b.npy"), &[2, 16], &b);
    for device in ["cpu", "gpu"] {
        if device == "gpu" && std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1") {
            continue;
        }
        let out = dir.join(format!("out-{device}.npz"));
        let st = mpsrt()
            .arg("run")
            .arg(model())
            .arg("--input")
            .arg(format!("INPUT0={}", dir.join("a.npy").display()))
            .arg("--input")
            .arg(format!("INPUT1={}", dir.join("b.npy").display()))
            .args(["--device", device, "--output"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        let sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let diff: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
        assert_eq!(read_npz_i32(&out, "OUTPUT0"), sum, "{device}");
        assert_eq!(read_npz_i32(&out, "OUTPUT1"), diff, "{device}");
    }
    // A wrong input name is an error that names what the model expects, not a crash.
    let st = mpsrt()
        .arg("run")
        .arg(model())
        .arg("--input")
        .arg(format!("NOPE={}", dir.join("a.npy").display()))
        .args(["--device", "cpu"])
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr).to_string();
    assert!(err.contains("INPUT0") || err.contains("NOPE"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bench_reports_latency_percentiles() {
    let st = mpsrt()
        .arg("bench")
        .arg(model())
        .args(["--batch", "4", "--iterations", "5", "--device", "cpu", "--json"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["batch"], 4);
    for k in ["p50_ms", "p90_ms", "p99_ms", "mean_ms"] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {v}");
    }
    assert!(v["p50_ms"].as_f64() <= v["p99_ms"].as_f64());
}
