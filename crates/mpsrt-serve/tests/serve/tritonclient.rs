//! The real Triton client library against the server: runs `tests/tritonclient_smoke.py` with the
//! Python named by `MPSRT_TRITONCLIENT_PYTHON` (needs `tritonclient[http,grpc]`). Without that
//! variable the check reports itself as not run, so the suite stays offline and hermetic.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tritonclient_http_and_grpc_when_python_given() {
    let Ok(python) = std::env::var("MPSRT_TRITONCLIENT_PYTHON") else {
        eprintln!("tritonclient check not run: set MPSRT_TRITONCLIENT_PYTHON to a python with tritonclient");
        return;
    };
    let mut o = options(&standard_repo());
    o.model_control_mode = mpsrt_serve::ModelControlMode::Explicit;
    o.load_model = vec!["*".into()];
    let s = start(o).await;
    let (h, g) = (s.http_addr.to_string(), s.grpc_addr.to_string());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tritonclient_smoke.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python).arg(script).args([&h, &g]).output().unwrap()
    })
    .await
    .unwrap();
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && log.contains("ALL OK"), "{log}");
    s.shutdown().await.unwrap();
}
