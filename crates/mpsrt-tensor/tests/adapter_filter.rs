//! `MPSRT_ADAPTER=<substring>` selects adapters by name; one that matches nothing leaves no GPU
//! and says why. Own binary: the registry reads the variable once.

use mpsrt_tensor::{self as mt, DType, Place};

#[test]
fn adapter_filter_that_matches_nothing() {
    std::env::set_var("MPSRT_ADAPTER", "no-such-adapter-xyz");
    assert_eq!(mpsrt_runtime::device_count(), 0);
    let e = mt::ones(&[1], DType::F32, Place::Gpu(0)).unwrap_err().to_string();
    assert!(e.contains("MPSRT_ADAPTER") && e.contains("no-such-adapter-xyz"), "{e}");
}
