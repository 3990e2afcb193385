//! `model_warmup`: the samples a config describes (checked like a hostile request), their
//! execution on every instance at load, and a load that fails when a sample fails.

use crate::common::*;
use mpsrt_serve::config::parse_pbtxt;
use mpsrt_serve::warmup::{run, sample_inputs};
use mpsrt_serve::{HostTensor, ModelInstance, ServeError, TensorData, TritonDType};
use serde_json::Value;
use std::path::Path;

fn config(warmup: &str) -> mpsrt_serve::proto::inference::ModelConfig {
    parse_pbtxt(&format!("{SIMPLE_CONFIG}\n{warmup}")).unwrap()
}

fn sample(batch: u32, a: &str, b: &str) -> String {
    format!(
        r#"model_warmup [ {{ name: "s" batch_size: {batch}
  inputs {{ key: "INPUT0" value: {{ data_type: TYPE_INT32 dims: [ 16 ] {a} }} }}
  inputs {{ key: "INPUT1" value: {{ data_type: TYPE_INT32 dims: [ 16 ] {b} }} }} }} ]"#
    )
}

fn raw(t: &HostTensor) -> &[u8] {
    match &t.data {
        TensorData::Raw(b) => b,
        TensorData::Bytes(_) => panic!("expected raw data"),
    }
}

fn err(c: &mpsrt_serve::proto::inference::ModelConfig, dir: &Path) -> String {
    sample_inputs(c, &c.model_warmup[0], dir).unwrap_err().message
}

#[test]
fn zero_random_and_file_data_with_the_batch_dim() {
    let dir = repo(&[("simple", Some(SIMPLE_CONFIG), &[(1, "simple")])]).join("simple");
    std::fs::create_dir_all(dir.join("warmup")).unwrap();
    let item: Vec<u8> = (0..16i32).flat_map(|v| (v * 3).to_le_bytes()).collect();
    std::fs::write(dir.join("warmup").join("in1.bin"), &item).unwrap();
    let c = config(&sample(4, "zero_data: true", "input_data_file: \"in1.bin\""));
    let ins = sample_inputs(&c, &c.model_warmup[0], &dir).unwrap();
    assert_eq!(ins.len(), 2);
    assert_eq!((ins[0].name.as_str(), ins[0].datatype), ("INPUT0", TritonDType::Int32));
    assert_eq!(ins[0].shape, vec![4, 16]);
    assert!(raw(&ins[0]).iter().all(|&b| b == 0) && raw(&ins[0]).len() == 4 * 16 * 4);
    assert_eq!(raw(&ins[1]), item.repeat(4).as_slice(), "the file's item, once per batch row");

    let c = config(&sample(2, "random_data: true", "random_data: true"));
    let a = sample_inputs(&c, &c.model_warmup[0], &dir).unwrap();
    let b = sample_inputs(&c, &c.model_warmup[0], &dir).unwrap();
    assert_eq!(a, b, "random data is deterministic");
    let vals: Vec<i32> =
        raw(&a[0]).chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(vals.iter().all(|v| (0..10).contains(v)), "{vals:?}");
    assert!(vals.iter().any(|&v| v != vals[0]), "not constant: {vals:?}");
    assert_ne!(raw(&a[0]), raw(&a[1]), "inputs get different streams");
}

#[test]
fn bad_samples_are_refused_with_the_reason() {
    let dir = std::env::temp_dir();
    let z = "zero_data: true";
    let cases = [
        (sample(0, z, z), "batch_size 0 must be between 1 and 8"),
        (sample(9, z, z), "batch_size 9 must be between 1 and 8"),
        (
            sample(1, z, "input_data_file: \"../config.pbtxt\""),
            "must be a file name inside warmup/",
        ),
        (sample(1, z, "input_data_file: \"missing.bin\""), "cannot read warmup/missing.bin"),
        (
            sample(1, z, z).replace(
                "dims: [ 16 ] zero_data: true } } }",
                "dims: [ 15 ] zero_data: true } } }",
            ),
            "input 'INPUT1' has dims [15]",
        ),
        (
            sample(1, z, z).replace("TYPE_INT32 dims: [ 16 ] zero", "TYPE_FP32 dims: [ 16 ] zero"),
            "is FP32 in the sample, INT32 in the model",
        ),
        (sample(1, z, z).replace("\"INPUT1\"", "\"INPUT9\""), "the model has no input 'INPUT9'"),
        (
            sample(1, z, z).replace("batch_size: 1", "batch_size: 1 count: 5000"),
            "count 5000 is above the limit",
        ),
    ];
    for (text, want) in cases {
        let c = config(&text);
        let got = err(&c, &dir);
        assert!(got.contains(want) && got.contains("warmup sample 's'"), "{want:?} not in {got:?}");
    }
    // Only one input named: the other has no data.
    let one = r#"model_warmup [ { name: "s" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } } ]"#;
    assert!(err(&config(one), &dir).contains("input 'INPUT1' has no data"));
    // A file of the wrong size is refused before it is read whole.
    let d = repo(&[("simple", Some(SIMPLE_CONFIG), &[(1, "simple")])]).join("simple");
    std::fs::create_dir_all(d.join("warmup")).unwrap();
    std::fs::write(d.join("warmup").join("short.bin"), [0u8; 60]).unwrap();
    let c = config(&sample(1, z, "input_data_file: \"short.bin\""));
    assert!(err(&c, &d).contains("has 60 bytes; the input needs 64"));
}

struct Counting {
    calls: Vec<Vec<i64>>,
    fail: bool,
}

impl ModelInstance for Counting {
    fn execute(
        &mut self,
        inputs: Vec<HostTensor>,
        _: &[String],
    ) -> Result<Vec<HostTensor>, ServeError> {
        self.calls.push(inputs[0].shape.clone());
        if self.fail {
            return Err(ServeError::internal("out of device memory"));
        }
        Ok(inputs)
    }
}

#[test]
fn run_executes_each_sample_count_times_and_names_a_failing_one() {
    let dir = std::env::temp_dir();
    let z = "zero_data: true";
    // One list of two samples, as bench/serve_multi_gpu.sh writes them.
    let first = sample(1, z, z).replace("batch_size: 1", "batch_size: 1 count: 3");
    let second = sample(8, z, z).replace("name: \"s\"", "name: \"b8\"");
    let c = config(&format!(
        "{}, {}",
        first.trim_end_matches(" ]"),
        second.trim_start_matches("model_warmup [")
    ));
    let mut inst = Counting { calls: Vec::new(), fail: false };
    run(&c, &dir, &mut inst).unwrap();
    assert_eq!(inst.calls, vec![vec![1, 16], vec![1, 16], vec![1, 16], vec![8, 16]]);
    let mut bad = Counting { calls: Vec::new(), fail: true };
    let e = run(&c, &dir, &mut bad).unwrap_err().message;
    assert!(e.contains("warmup sample 's' failed: out of device memory"), "{e}");
    assert_eq!(bad.calls.len(), 1, "stops at the first failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sample_makes_the_model_unavailable_and_a_good_one_loads() {
    let z = "zero_data: true";
    let good = format!("{}\n{}", SIMPLE_CONFIG, sample(8, z, z));
    let bad = format!(
        "{}\n{}",
        SIMPLE_CONFIG.replace("\"simple\"", "\"badwarm\""),
        sample(8, z, z)
            .replace("dims: [ 16 ] zero_data: true } } }", "dims: [ 4 ] zero_data: true } } }")
    );
    let dir = repo(&[
        ("simple", Some(good.as_str()), &[(1, "simple")]),
        ("badwarm", Some(bad.as_str()), &[(1, "simple")]),
    ]);
    let s = start(options(&dir)).await;
    let (c, base) = (client(), http(&s));
    assert_eq!(c.get(format!("{base}/v2/models/simple/ready")).send().await.unwrap().status(), 200);
    assert_eq!(
        c.get(format!("{base}/v2/models/badwarm/ready")).send().await.unwrap().status(),
        400
    );
    let idx: Value =
        c.post(format!("{base}/v2/repository/index")).send().await.unwrap().json().await.unwrap();
    let row = idx.as_array().unwrap().iter().find(|r| r["name"] == "badwarm").unwrap().clone();
    let reason = row["reason"].as_str().unwrap_or("");
    assert!(reason.contains("warmup sample 's'") && reason.contains("dims [4]"), "{row}");
}
