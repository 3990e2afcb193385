//! `capture_launches` on a real device (lavapipe in CI): the dispatches recorded inside the
//! closure come back with their pipeline, buffer identities, windows, metadata and workgroups,
//! still run as usual, and replaying a captured launch over other buffers computes the same
//! kernel there (what the Paddle plugin's eager fast path does).

use mpsrt_runtime::{capture_launches, gpu_available, gpu_device, Binding, GpuBuffer, Kernel};

const SCALE: &str = "struct Meta { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<uniform> M: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < M.w[0][0]) { y[g.x] = x[g.x] * M.w[0][1] + M.w[0][2]; }
}";

#[test]
fn captured_launch_names_its_buffers_and_replays_elsewhere() {
    if !gpu_available() {
        assert_ne!(
            std::env::var("MPSRT_REQUIRE_GPU").as_deref(),
            Ok("1"),
            "MPSRT_REQUIRE_GPU=1 but no GPU"
        );
        return;
    }
    let d = gpu_device(0).unwrap();
    let p = d.pipeline(Kernel { source: SCALE, entry: "main" }).unwrap();
    let n = 100u32;
    let data: Vec<u32> = (0..n).collect();
    let x = d.upload("t", bytemuck::cast_slice(&data)).unwrap();
    let y = d.alloc("t", 4 * n as u64).unwrap();
    let meta = [n, 3, 1, 0];
    let (r, launches) = capture_launches(|| {
        d.dispatch(
            "t",
            &p,
            &[(&x).into(), Binding::window(&y, 0, 4 * n as u64)],
            bytemuck::cast_slice(&meta),
            [2, 1, 1],
        )
    });
    r.unwrap();
    let addr = |b: &GpuBuffer| b as *const GpuBuffer as usize;
    let [l] = &launches[..] else { panic!("{} launches captured", launches.len()) };
    assert_eq!(l.device, d.index());
    assert_eq!(l.bindings, vec![(addr(&x), None), (addr(&y), Some((0, 4 * n as u64)))]);
    assert_eq!(l.meta, bytemuck::cast_slice::<u32, u8>(&meta));
    assert_eq!(l.workgroups, [2, 1, 1]);
    let want: Vec<u32> = data.iter().map(|v| v * 3 + 1).collect();
    let read = |b: &GpuBuffer| -> Vec<u32> {
        bytemuck::pod_collect_to_vec(&d.read(b, 0, 4 * n as u64).unwrap())
    };
    assert_eq!(read(&y), want, "the captured dispatch ran");
    // Outside a capture nothing is collected; a replay over other buffers computes there.
    let x2 = d.upload("t", bytemuck::cast_slice(&want)).unwrap();
    let y2 = d.alloc("t", 4 * n as u64).unwrap();
    let (r, none) = capture_launches(|| Ok::<_, mpsrt_core::Error>(()));
    r.unwrap();
    assert!(none.is_empty());
    let bindings = [Binding::from(&x2), Binding { buffer: &y2, window: l.bindings[1].1 }];
    d.dispatch("t", &l.pipeline, &bindings, &l.meta, l.workgroups).unwrap();
    assert_eq!(read(&y2), want.iter().map(|v| v * 3 + 1).collect::<Vec<_>>());
}
