//! The server's execution path replays plans (issue 22): an `EngineInstance` (what
//! `EngineBackend::load` makes per model instance) runs every request on its one `Session`,
//! so repeated requests of one batch shape reuse that shape's plan and recording, a new batch
//! shape gets its own, and every answer matches the model computed here on the host. GPU only
//! (lavapipe in CI; skipped without an adapter unless `MPSRT_REQUIRE_GPU=1`).

use mpsrt_core::Place;
use mpsrt_engine::triton::EngineInstance;
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_serve::{HostTensor, ModelInstance, TensorData, TritonDType};
use std::path::PathBuf;

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn repeated_requests_of_one_batch_shape_are_replayed() {
    let ok = mpsrt_runtime::gpu_available();
    assert!(ok || std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    if !ok {
        return;
    }
    // The example repository's `relu_fp32`: INPUT0 [N, 8] -> Relu.
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/model_repository/relu_fp32/1/model.onnx");
    let session = Session::load(&model, Place::Gpu(0), SessionOptions::default()).unwrap();
    let input = session.inputs()[0].name.clone();
    let mut inst = EngineInstance::new(session.with_replay(true));
    for (req, batch) in [3usize, 3, 3, 3, 5, 5, 5, 3].into_iter().enumerate() {
        let x: Vec<f32> = (0..batch * 8).map(|i| (i as f32 - 11.0) * 0.5 + req as f32).collect();
        let bytes = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = HostTensor {
            name: input.clone(),
            datatype: TritonDType::Fp32,
            shape: vec![batch as i64, 8],
            data: TensorData::Raw(bytes),
        };
        let out = inst.execute(vec![t], &[]).unwrap();
        let TensorData::Raw(got) = &out[0].data else { panic!("raw output expected") };
        let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
        assert_eq!(f32s(got), want, "request {req}, batch {batch}");
        assert_eq!(out[0].shape, vec![batch as i64, 8]);
        // The second request of a shape is captured; from then on it is replayed.
        let seen = [3usize, 3, 3, 3, 5, 5, 5, 3][..=req].iter().filter(|&&b| b == batch).count();
        let st = inst.session().replay_status(&[vec![batch, 8]]).unwrap();
        assert_eq!(st.starts_with("ready"), seen >= 2, "request {req}, batch {batch}: {st}");
    }
}
