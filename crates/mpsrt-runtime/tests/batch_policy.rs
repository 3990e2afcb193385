//! When a batch of dispatches is submitted (`GpuDevice::batch_full_locked`): tiny dispatches
//! (small work) keep one batch open past `max_ops_per_batch` up to `max_ops_per_long_batch`,
//! dispatches with real work are submitted every `max_ops_per_batch` while the GPU is idle, and a
//! synchronize submits whatever is open (results correct either way).
//!
//! One test function: it reads the device's submission counter, which other tests of the same
//! binary would move.

use mpsrt_runtime::{gpu_available, gpu_device, Kernel};

const SCALE: &str = "struct Meta { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<uniform> M: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x + g.y * 65535u * 64u;
  if (i < M.w[0][0]) { y[i] = x[i] + M.w[0][1]; }
}";

#[test]
fn small_work_batches_grow_and_sync_flushes() {
    if !gpu_available() {
        assert_ne!(
            std::env::var("MPSRT_REQUIRE_GPU").as_deref(),
            Ok("1"),
            "MPSRT_REQUIRE_GPU=1 but no GPU"
        );
        return;
    }
    let d = gpu_device(0).unwrap();
    let (soft, long) = (d.config().max_ops_per_batch, d.config().max_ops_per_long_batch);
    if soft != 64 || long != 512 {
        // Overridden by MPSRT_MAX_OPS_PER_BATCH / MPSRT_MAX_OPS_PER_LONG_BATCH: the counts
        // below assume the defaults.
        return;
    }
    let p = d.pipeline(Kernel { source: SCALE, entry: "main" }).unwrap();
    let submits = || d.submit_timing().submits;
    let run = |n: u64, count: usize, x: &mpsrt_runtime::GpuBuffer, y: &mpsrt_runtime::GpuBuffer| {
        for k in 0..count {
            let meta = [n as u32, k as u32 + 1, 0, 0];
            let wg = n.div_ceil(64) as u32;
            d.dispatch("t", &p, &[x.into(), y.into()], bytemuck::cast_slice(&meta), [wg, 1, 1])
                .unwrap();
        }
    };

    // Tiny dispatches (16 elements): one batch holds `long` of them.
    let n = 16u64;
    let x = d.upload("t", bytemuck::cast_slice(&(0..n as u32).collect::<Vec<_>>())).unwrap();
    let y = d.alloc("t", 4 * n).unwrap();
    d.synchronize().unwrap();
    let s0 = submits();
    run(n, soft, &x, &y);
    assert_eq!(submits(), s0, "{soft} tiny dispatches are still one open batch");
    run(n, long - soft - 1, &x, &y);
    assert_eq!(submits(), s0, "{} tiny dispatches are still one open batch", long - 1);
    run(n, 1, &x, &y);
    assert_eq!(submits(), s0 + 1, "the batch goes at {long} dispatches");
    // An open batch of 10 goes at the sync; the last dispatch's result is read back.
    run(n, 10, &x, &y);
    assert_eq!(submits(), s0 + 1);
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&d.read(&y, 0, 4 * n).unwrap());
    assert!(submits() > s0 + 1, "the read submitted the open batch");
    assert_eq!(got, (0..n as u32).map(|i| i + 10).collect::<Vec<_>>());

    // Real work (256 Ki elements, 2 MiB bound per dispatch) on an idle GPU: submitted every
    // `soft` dispatches, as before.
    let n = 256 * 1024u64;
    let x = d.upload("t", bytemuck::cast_slice(&(0..n as u32).collect::<Vec<_>>())).unwrap();
    let y = d.alloc("t", 4 * n).unwrap();
    d.synchronize().unwrap();
    let s1 = submits();
    run(n, soft - 1, &x, &y);
    assert_eq!(submits(), s1, "{} dispatches are one open batch", soft - 1);
    run(n, 1, &x, &y);
    assert_eq!(submits(), s1 + 1, "a batch with real work goes at {soft} dispatches");
    d.synchronize().unwrap();
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&d.read(&y, 0, 4 * n).unwrap());
    // The last dispatch (the first of its `run`) added 1.
    assert!(got.iter().enumerate().all(|(i, &v)| v == i as u32 + 1));
}
