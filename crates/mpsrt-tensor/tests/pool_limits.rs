//! `MPS_MAX_POOL_SIZE` and `MPS_MAX_BUFFER_AGE` bound what the allocator caches. Own binary:
//! the device reads the variables when it is opened.

mod common;
use mpsrt_tensor::{self as mt, DType};

#[test]
fn pool_size_and_age_limits() {
    std::env::set_var("MPS_MAX_POOL_SIZE", "16384");
    std::env::set_var("MPS_MAX_BUFFER_AGE", "50");
    let Some(&p) = common::gpus().first() else { return };
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    // Ten live 64 KiB tensors, then all freed: the cache may keep at most 16 KiB of them.
    let ts: Vec<_> = (0..10).map(|_| mt::zeros(&[16384], DType::F32, p).unwrap()).collect();
    dev.synchronize().unwrap();
    drop(ts);
    dev.synchronize().unwrap();
    let s = dev.memory_stats();
    assert!(s.cached <= 16384, "cached {} exceeds MPS_MAX_POOL_SIZE: {s:?}", s.cached);
    assert_eq!(s.allocated, 0);
    // Small cached buffers age out: after > 1 s (the age sweep runs at most once a second) any
    // release triggers the sweep and buffers unused for > 50 ms go back to the driver.
    let t = mt::ones(&[8], DType::F32, p).unwrap();
    dev.synchronize().unwrap();
    let before = dev.memory_stats().cached;
    assert!(before > 0, "something is cached: {:?}", dev.memory_stats());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    drop(t);
    dev.synchronize().unwrap();
    let after = dev.memory_stats();
    assert!(after.cached < before + 256, "old buffers released: before {before}, after {after:?}");
    assert!(after.cached <= 256, "only the just-freed buffer may remain: {after:?}");
}
