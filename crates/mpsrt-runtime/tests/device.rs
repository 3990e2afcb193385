//! The runtime seam on a real device (lavapipe in CI): uploads, device-to-device copies, reads at
//! unaligned offsets, a hand-written kernel with a metadata block, and errors instead of panics
//! for invalid WGSL and oversized dispatches, and `capture_launches`.

use mpsrt_runtime::{gpu_available, gpu_device, Binding, Kernel};

fn device() -> Option<std::sync::Arc<mpsrt_runtime::GpuDevice>> {
    if !gpu_available() {
        assert_ne!(
            std::env::var("MPSRT_REQUIRE_GPU").as_deref(),
            Ok("1"),
            "MPSRT_REQUIRE_GPU=1 but no GPU"
        );
        return None;
    }
    Some(gpu_device(0).unwrap())
}

#[test]
fn copies_and_unaligned_reads() {
    let Some(d) = device() else { return };
    let data: Vec<u8> = (0..203u8).collect();
    let a = d.upload("test", &data).unwrap();
    assert_eq!(d.read(&a, 0, 203).unwrap(), data);
    for (off, len) in [(1u64, 5u64), (7, 13), (200, 3), (9, 0)] {
        assert_eq!(
            d.read(&a, off, len).unwrap(),
            data[off as usize..(off + len) as usize].to_vec(),
            "{off}+{len}"
        );
    }
    let b = d.alloc("test", 256).unwrap();
    d.write(&b, 0, &[0u8; 256]).unwrap();
    d.copy(&a, 4, &b, 8, 100).unwrap();
    let got = d.read(&b, 0, 120).unwrap();
    assert_eq!(&got[8..108], &data[4..104]);
    assert_eq!(&got[..8], &[0u8; 8]);
    assert!(d.copy(&a, 1, &b, 0, 4).unwrap_err().to_string().starts_with("[copy]"));
}

#[test]
fn kernel_with_metadata_and_errors() {
    let Some(d) = device() else { return };
    let src = "struct Meta { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> M: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < M.w[0][0]) { out[g.x] = g.x * M.w[0][1]; }
}";
    let p = d.pipeline(Kernel { source: src, entry: "main" }).unwrap();
    let again = d.pipeline(Kernel { source: src, entry: "main" }).unwrap();
    assert_eq!(p.key(), again.key(), "cached");
    let out = d.alloc("test", 4 * 100).unwrap();
    let meta: [u32; 4] = [100, 3, 0, 0];
    d.dispatch("test", &p, &[Binding::from(&out)], bytemuck::cast_slice(&meta), [2, 1, 1]).unwrap();
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&d.read(&out, 0, 400).unwrap());
    assert_eq!(got, (0..100).map(|i| i * 3).collect::<Vec<u32>>());
    let bad = d.pipeline(Kernel { source: "fn main( {", entry: "main" });
    assert!(bad.err().map(|e| e.to_string()).unwrap_or_default().starts_with("[compile]"));
    let limit = d.properties().max_compute_workgroups_per_dimension;
    let e = d
        .dispatch("big", &p, &[Binding::from(&out)], bytemuck::cast_slice(&meta), [limit + 1, 1, 1])
        .unwrap_err();
    assert!(e.to_string().starts_with("[big]") && e.to_string().contains("exceeds"), "{e}");
    d.synchronize().unwrap();
}

/// For `capture_launches` (what the Paddle plugin's eager fast path replays).
const CAPTURE_SCALE: &str = "struct Meta { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<uniform> M: Meta;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < M.w[0][0]) { y[g.x] = x[g.x] * M.w[0][1] + M.w[0][2]; }
}";

/// `capture_launches`: the dispatches recorded inside the closure come back with their
/// pipeline, buffer identities, windows, metadata and workgroups, still run as usual, and
/// replaying a captured launch over other buffers computes the same kernel there.
#[test]
fn captured_launch_names_its_buffers_and_replays_elsewhere() {
    let Some(d) = device() else { return };
    let p = d.pipeline(Kernel { source: CAPTURE_SCALE, entry: "main" }).unwrap();
    let n = 100u32;
    let data: Vec<u32> = (0..n).collect();
    let x = d.upload("t", bytemuck::cast_slice(&data)).unwrap();
    let y = d.alloc("t", 4 * n as u64).unwrap();
    let meta = [n, 3, 1, 0];
    let (r, launches) = mpsrt_runtime::capture_launches(|| {
        d.dispatch(
            "t",
            &p,
            &[(&x).into(), Binding::window(&y, 0, 4 * n as u64)],
            bytemuck::cast_slice(&meta),
            [2, 1, 1],
        )
    });
    r.unwrap();
    let addr = |b: &mpsrt_runtime::GpuBuffer| b as *const mpsrt_runtime::GpuBuffer as usize;
    let [l] = &launches[..] else { panic!("{} launches captured", launches.len()) };
    assert_eq!(l.device, d.index());
    assert_eq!(l.bindings, vec![(addr(&x), None), (addr(&y), Some((0, 4 * n as u64)))]);
    assert_eq!(l.meta, bytemuck::cast_slice::<u32, u8>(&meta));
    assert_eq!(l.workgroups, [2, 1, 1]);
    let want: Vec<u32> = data.iter().map(|v| v * 3 + 1).collect();
    let read = |b: &mpsrt_runtime::GpuBuffer| -> Vec<u32> {
        bytemuck::pod_collect_to_vec(&d.read(b, 0, 4 * n as u64).unwrap())
    };
    assert_eq!(read(&y), want, "the captured dispatch ran");
    // Outside a capture nothing is collected; a replay over other buffers computes there.
    let x2 = d.upload("t", bytemuck::cast_slice(&want)).unwrap();
    let y2 = d.alloc("t", 4 * n as u64).unwrap();
    let (r, none) = mpsrt_runtime::capture_launches(|| Ok::<_, mpsrt_core::Error>(()));
    r.unwrap();
    assert!(none.is_empty());
    let bindings = [Binding::from(&x2), Binding { buffer: &y2, window: l.bindings[1].1 }];
    d.dispatch("t", &l.pipeline, &bindings, &l.meta, l.workgroups).unwrap();
    assert_eq!(read(&y2), want.iter().map(|v| v * 3 + 1).collect::<Vec<_>>());
}
