//! GPU timestamps (`timing.rs`) on the real adapter (lavapipe in CI; skipped without one unless
//! `MPSRT_REQUIRE_GPU=1`): marks around recorded work come back in order, and an adapter
//! without timestamp queries gives no timer instead of failing.

#[test]
fn marks_around_work_come_back_in_order() {
    if !mpsrt_runtime::gpu_available() {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
        return;
    }
    let dev = mpsrt_runtime::gpu_device(0).unwrap();
    let Some(mut timer) = dev.gpu_timer(8) else {
        assert!(!dev.has_timestamps());
        eprintln!("{} has no timestamp queries", dev.properties().display_name());
        return;
    };
    let data = vec![7u8; 1 << 20];
    let a = dev.upload("test", &data).unwrap();
    let b = dev.alloc("test", data.len() as u64).unwrap();
    assert_eq!(timer.mark().unwrap(), 0);
    dev.copy(&a, 0, &b, 0, data.len() as u64).unwrap();
    assert_eq!(timer.mark().unwrap(), 1);
    dev.synchronize().unwrap();
    assert_eq!(timer.mark().unwrap(), 2);
    let (ticks, period) = timer.read().unwrap();
    assert_eq!(ticks.len(), 3);
    assert!(period > 0.0, "timestamp period {period}");
    assert!(ticks.windows(2).all(|w| w[1] >= w[0]), "{ticks:?}");
    assert_eq!(mpsrt_runtime::ticks_to_ns(&ticks, period).len(), 2);
    assert_eq!(dev.read(&b, 0, 8).unwrap(), vec![7u8; 8]);
    let mut small = dev.gpu_timer(1).unwrap();
    small.mark().unwrap();
    assert!(small.mark().is_err(), "a full timer refuses more marks");
}
