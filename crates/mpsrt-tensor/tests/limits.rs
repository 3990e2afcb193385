//! Adapter limits: more workgroups than one dispatch dimension allows (2-D grid), and tensors
//! larger than `max_storage_buffer_binding_size` (refused with a clear error, never a crash).

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, ErrorKind, Place};

#[test]
fn dispatch_beyond_65535_workgroups() {
    // Odd size (not a multiple of 4) keeps one element per thread: 16,776,967 threads need
    // 65,536 workgroups of 256, one more than a single dimension may hold.
    let n = 65_535 * 256 + 7;
    let a = mt::arange(0.0, n as f64, 1.0, DType::F32, Place::Cpu).unwrap();
    let b = mt::full(&[n], 0.5, DType::F32, Place::Cpu).unwrap();
    let want = mt::add(&a, &b).unwrap().to_vec::<f32>().unwrap();
    for p in gpus() {
        let got = mt::add(&a.to(p).unwrap(), &b.to(p).unwrap()).unwrap().to_vec::<f32>().unwrap();
        assert!(got == want, "large add differs on {p}");
    }
}

#[test]
fn tensors_beyond_the_binding_limit_are_refused_clearly() {
    for p in gpus() {
        let dev = mpsrt_runtime::gpu_device(0).unwrap();
        let limit = dev.properties().max_storage_buffer_binding_size;
        if limit > (512 << 20) {
            eprintln!(
                "binding limit {limit} too large to test here; lavapipe (128 MiB) covers it in CI"
            );
            continue;
        }
        let n = limit as usize + 64;
        match mt::zeros(&[n], DType::U8, p) {
            Ok(t) => panic!("a {n}-byte tensor should not fit a {limit}-byte binding: {t:?}"),
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::OutOfMemory, "{e}");
                let m = e.to_string();
                assert!(
                    m.contains("max_storage_buffer_binding_size") || m.contains("max_buffer_size"),
                    "{m}"
                );
            }
        }
        // The device keeps working.
        let t = mt::ones(&[3], DType::F32, p).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    }
}
