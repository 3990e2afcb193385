//! The bind-group cache on a real device (lavapipe in CI): a dispatch over the same buffers reuses
//! its bind group, recycled buffers with new contents give correct results, the cache stays
//! bounded over many distinct buffers, and `empty_cache` leaves no cached bind group behind.
//!
//! One test function: the device is shared by the tests of a binary and these checks read its
//! counters.

use mpsrt_runtime::{gpu_available, gpu_device, Binding, Kernel};

const SCALE: &str = "struct Meta { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<uniform> M: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < M.w[0][0]) { y[g.x] = x[g.x] * M.w[0][1] + M.w[0][2]; }
}";

/// A kernel that reads its inputs in a different order from the bindings' declaration, with a
/// second read-only buffer: shares no layout with `SCALE`.
const ADD: &str = "@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> c: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&c)) { c[g.x] = b[g.x] + a[g.x]; }
}";

fn words(d: &mpsrt_runtime::GpuDevice, b: &mpsrt_runtime::GpuBuffer, n: u64) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(&d.read(b, 0, 4 * n).unwrap())
}

#[test]
fn bind_groups_are_reused_safely_and_bounded() {
    if !gpu_available() {
        assert_ne!(
            std::env::var("MPSRT_REQUIRE_GPU").as_deref(),
            Ok("1"),
            "MPSRT_REQUIRE_GPU=1 but no GPU"
        );
        return;
    }
    let d = gpu_device(0).unwrap();
    let scale = d.pipeline(Kernel { source: SCALE, entry: "main" }).unwrap();
    let add = d.pipeline(Kernel { source: ADD, entry: "main" }).unwrap();
    let n = 100u64;
    let meta = |k: u32, c: u32| -> [u32; 4] { [n as u32, k, c, 0] };

    // Hit after reuse: same buffers, different metadata (dynamic offset, same bind group).
    let x = d.upload("t", bytemuck::cast_slice(&(0..n as u32).collect::<Vec<_>>())).unwrap();
    let y = d.alloc("t", 4 * n).unwrap();
    let s0 = d.bind_cache_stats();
    d.dispatch(
        "t",
        &scale,
        &[(&x).into(), (&y).into()],
        bytemuck::cast_slice(&meta(2, 0)),
        [2, 1, 1],
    )
    .unwrap();
    d.dispatch(
        "t",
        &scale,
        &[(&x).into(), (&y).into()],
        bytemuck::cast_slice(&meta(3, 1)),
        [2, 1, 1],
    )
    .unwrap();
    let s1 = d.bind_cache_stats();
    assert_eq!((s1.misses - s0.misses, s1.hits - s0.hits), (1, 1), "{s0:?} -> {s1:?}");
    assert_eq!(words(&d, &y, n), (0..n as u32).map(|i| i * 3 + 1).collect::<Vec<_>>());
    // The same bind group again in a new batch (the metadata lands in another arena slot).
    d.dispatch(
        "t",
        &scale,
        &[(&x).into(), (&y).into()],
        bytemuck::cast_slice(&meta(5, 0)),
        [2, 1, 1],
    )
    .unwrap();
    assert_eq!(words(&d, &y, n), (0..n as u32).map(|i| i * 5).collect::<Vec<_>>());
    assert!(d.bind_cache_stats().hits > s1.hits);

    // Recycled buffers with different contents between ops: each round frees its buffers and
    // uploads new data into buffers the allocator hands back (the cached bind groups name them).
    for round in 0..20u32 {
        let a: Vec<u32> = (0..n as u32).map(|i| i * round + 7).collect();
        let b: Vec<u32> = (0..n as u32).map(|i| i ^ round).collect();
        let ga = d.upload("t", bytemuck::cast_slice(&a)).unwrap();
        let gb = d.upload("t", bytemuck::cast_slice(&b)).unwrap();
        let gc = d.alloc("t", 4 * n).unwrap();
        d.dispatch("t", &add, &[(&ga).into(), (&gb).into(), (&gc).into()], &[], [2, 1, 1]).unwrap();
        // A second op on the recycled output, then a windowed binding of the same buffer.
        let gy = d.alloc("t", 4 * n).unwrap();
        d.dispatch(
            "t",
            &scale,
            &[(&gc).into(), (&gy).into()],
            bytemuck::cast_slice(&meta(2, round)),
            [2, 1, 1],
        )
        .unwrap();
        let want: Vec<u32> = a.iter().zip(&b).map(|(p, q)| (p + q) * 2 + round).collect();
        assert_eq!(words(&d, &gy, n), want, "round {round}");
        let window = Binding::window(&gc, 0, 4 * 64);
        d.dispatch("t", &add, &[window, window, (&gy).into()], &[], [2, 1, 1]).unwrap();
        let got = words(&d, &gy, 64);
        let sums: Vec<u32> = a.iter().zip(&b).map(|(p, q)| 2 * (p + q)).take(64).collect();
        assert_eq!(got, sums, "round {round} (window)");
    }
    let s2 = d.bind_cache_stats();
    assert!(s2.hits > s1.hits + 20, "recycled buffers should hit: {s1:?} -> {s2:?}");

    // No unbounded growth: 10,000 ops on distinct live outputs.
    let mut keep = Vec::new();
    for i in 0..10_000u32 {
        let out = d.alloc("t", 4 * n).unwrap();
        d.dispatch(
            "t",
            &scale,
            &[(&x).into(), (&out).into()],
            bytemuck::cast_slice(&meta(1, i)),
            [2, 1, 1],
        )
        .unwrap();
        keep.push(out);
        assert!(d.bind_cache_stats().entries <= 4096);
    }
    assert_eq!(words(&d, &keep[9_999], 3), vec![9_999, 10_000, 10_001]);
    let s3 = d.bind_cache_stats();
    assert!(s3.clears > s2.clears, "{s3:?}");

    // Releasing buffers to the driver drops every cached bind group (none may keep a freed
    // buffer alive), and the memory statistics see the buffers gone.
    drop((keep, x, y));
    d.synchronize().unwrap();
    d.empty_cache();
    let s4 = d.bind_cache_stats();
    assert_eq!(s4.entries, 0, "{s4:?}");
    let m = d.memory_stats();
    assert_eq!((m.allocated, m.cached, m.reserved), (0, 0, 0), "{m:?}");
}
