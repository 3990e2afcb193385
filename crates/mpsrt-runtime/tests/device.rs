//! The runtime seam on a real device (lavapipe in CI): uploads, device-to-device copies, reads at
//! unaligned offsets, a hand-written kernel with a metadata block, and errors instead of panics
//! for invalid WGSL and oversized dispatches.

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
