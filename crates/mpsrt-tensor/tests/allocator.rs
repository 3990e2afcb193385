//! Caching allocator behaviour on a real GPU device (lavapipe in CI). Own test binary so no other
//! test allocates concurrently; the device here uses the staging readback path
//! (`MPSRT_UNIFIED_FAST_PATH=0`) so both download paths are exercised across binaries, and a
//! 64 MiB memory limit to test the out-of-memory error.

mod common;
use mpsrt_tensor::{self as mt, DType, ErrorKind, Place};

#[test]
fn allocator_statistics_reuse_limits() {
    // Set before the device is opened (first use below); this binary has a single test.
    std::env::set_var("MPSRT_UNIFIED_FAST_PATH", "0");
    std::env::set_var("MPSRT_MEMORY_LIMIT", (64u64 << 20).to_string());
    let Some(&p) = common::gpus().first() else {
        eprintln!("no GPU: allocator test needs one (CI sets MPSRT_REQUIRE_GPU=1)");
        return;
    };
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    assert!(!dev.uses_mapped_fast_path());
    dev.synchronize().unwrap();
    dev.empty_cache();
    let s0 = dev.memory_stats();
    assert_eq!((s0.allocated, s0.reserved), (0, 0), "fresh device: {s0:?}");

    // Exact accounting: 1000 f32 = 4000 bytes -> size class 4096.
    let a = mt::zeros(&[1000], DType::F32, p).unwrap();
    let s1 = dev.memory_stats();
    // `zeros` uploads one element (class 256) and broadcasts it into the 4096-byte output; the
    // temporary is already freed but still reserved: it waits for its batch to complete.
    assert_eq!((s1.allocated, s1.reserved, s1.cached), (4096, 4096 + 256, 0), "{s1:?}");
    assert_eq!(s1.peak_allocated, 4096 + 256, "{s1:?}");
    dev.synchronize().unwrap();
    let s2 = dev.memory_stats();
    assert_eq!(
        (s2.allocated, s2.cached, s2.reserved),
        (4096, 256, 4096 + 256),
        "completed: now cached: {s2:?}"
    );
    drop(a);
    dev.synchronize().unwrap();
    let s3 = dev.memory_stats();
    assert_eq!((s3.allocated, s3.cached, s3.reserved), (0, 4096 + 256, 4096 + 256), "{s3:?}");
    // Same size again is a cache hit and reserves nothing new.
    let b = mt::zeros(&[1000], DType::F32, p).unwrap();
    let s4 = dev.memory_stats();
    assert_eq!(s4.reserved, 4096 + 256, "{s4:?}");
    assert_eq!(s4.cache_hits, s3.cache_hits + 2, "{s4:?}");
    drop(b);
    dev.reset_peak_memory();
    assert_eq!(dev.memory_stats().peak_allocated, 0);
    dev.synchronize().unwrap();
    dev.empty_cache();
    assert_eq!(dev.memory_stats().reserved, 0, "empty_cache returns everything");

    // A fixed workload does not grow reserved memory.
    let x = mt::randn(&[257], DType::F32, p).unwrap();
    let y = mt::randn(&[257], DType::F32, p).unwrap();
    let step = || {
        let s = mt::add(&x, &y).unwrap();
        let e = mt::exp(&s).unwrap();
        mt::multiply(&e, &x).unwrap()
    };
    // Warm up past the in-flight limit so the steady state is reached.
    for _ in 0..1000 {
        step();
    }
    dev.synchronize().unwrap();
    let warm = dev.memory_stats().reserved;
    for _ in 0..10_000 {
        step();
    }
    dev.synchronize().unwrap();
    let after = dev.memory_stats().reserved;
    assert_eq!(after, warm, "reserved grew from {warm} to {after} over 10,000 iterations");

    // Stream-ordered reuse: a buffer freed while recorded work still reads it goes to the next
    // same-class allocation at once (no new reservation), and a host write into it waits for
    // that work — `b` must see `a`'s values, not the upload that reuses `a`'s buffer.
    dev.synchronize().unwrap();
    let a = mt::Tensor::from_slice(&[1f32; 3000], &[3000], Place::Cpu).unwrap().to(p).unwrap();
    let b = mt::add_scalar(&a, 1.0).unwrap();
    let reserved = dev.memory_stats().reserved;
    drop(a);
    let c = mt::Tensor::from_slice(&[10f32; 3000], &[3000], Place::Cpu).unwrap().to(p).unwrap();
    assert_eq!(dev.memory_stats().reserved, reserved, "the pending buffer was reused");
    let (bv, cv) = (b.to_vec::<f32>().unwrap(), c.to_vec::<f32>().unwrap());
    assert!(bv.iter().all(|&v| v == 2.0), "b read the reused buffer's new data: {:?}", &bv[..4]);
    assert!(cv.iter().all(|&v| v == 10.0), "c: {:?}", &cv[..4]);
    drop((b, c));

    // Several outputs in one readback (the staging path here): odd byte offsets and lengths
    // (u8 views), an empty tensor and a strided view, each equal to its own `to_bytes`.
    let bytes: Vec<u8> = (0..=250).collect();
    let u = mt::Tensor::from_slice(&bytes, &[251], Place::Cpu).unwrap().to(p).unwrap();
    let f = mt::arange(0.0, 37.0, 1.0, DType::F32, p).unwrap();
    let e = mt::zeros(&[0, 3], DType::F32, p).unwrap();
    let u_view = u.slice(0, Some(3), Some(250), 2).unwrap();
    let f_view = f.slice(0, Some(5), Some(30), 1).unwrap();
    let u_odd = u.slice(0, Some(7), Some(100), 1).unwrap(); // byte offset 7, length 93
    let ts = [&u_view, &f, &e, &f_view, &u_odd, &u];
    let many = mt::Tensor::to_bytes_many(&ts).unwrap();
    for (i, t) in ts.iter().enumerate() {
        assert_eq!(many[i], t.to_bytes().unwrap(), "part {i}");
    }

    // Out of memory: a clear error, not an abort, naming the variable to change.
    let e = mt::zeros(&[100 << 20], DType::U8, p).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfMemory, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("out of memory")
            && msg.contains("MPSRT_MEMORY_LIMIT")
            && msg.contains("100.00 MiB"),
        "{msg}"
    );
    // The device still works afterwards, and readback through the staging path is exact.
    let z = mt::arange(0.0, 5.0, 1.0, DType::I32, p).unwrap();
    assert_eq!(z.to_vec::<i32>().unwrap(), vec![0, 1, 2, 3, 4]);
    let cpu = z.to(Place::Cpu).unwrap();
    assert_eq!(cpu.to_vec::<i32>().unwrap(), vec![0, 1, 2, 3, 4]);
}
