//! `MPSRT_DEVICE=cpu`: the GPU is reported unavailable, GPU places are clear errors, and
//! everything still works on the CPU. Own binary: the registry reads the variable once.

use mpsrt_tensor::{self as mt, DType, ErrorKind, Place};

#[test]
fn cpu_only_mode() {
    std::env::set_var("MPSRT_DEVICE", "cpu");
    assert!(!mpsrt_runtime::gpu_available());
    assert_eq!(mpsrt_runtime::device_count(), 0);
    assert_eq!(mpsrt_runtime::default_place(), Place::Cpu);
    let e = mt::zeros(&[2], DType::F32, Place::Gpu(0)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Device);
    assert!(e.to_string().contains("MPSRT_DEVICE=cpu"), "{e}");
    let x = mt::arange(0.0, 4.0, 1.0, DType::F32, Place::Cpu).unwrap();
    let y = mt::exp(&mt::add(&x, &x).unwrap()).unwrap();
    assert_eq!(y.place(), Place::Cpu);
    assert_eq!(y.to_vec::<f32>().unwrap()[0], 1.0);
}
