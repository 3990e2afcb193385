//! Tensors really past the adapter's storage-binding limit (lavapipe: 128 MiB): 40M f32
//! elements (152.6 MiB) created, combined, reduced and read back on the GPU. Kept to a few
//! ops: every one streams ~160 MB through lavapipe. The per-op table with a lowered limit is
//! `large_operands.rs`.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType};

#[test]
fn forty_million_elements_past_one_binding() {
    const N: usize = 40_000_000;
    for p in gpus() {
        let limit =
            mpsrt_runtime::gpu_device(0).unwrap().properties().max_storage_buffer_binding_size;
        if (N * 4) as u64 <= limit {
            eprintln!("skipped: the adapter binds {limit} bytes, more than this test's 160 MB");
            continue;
        }
        let x = mt::ones(&[N], DType::F32, p).unwrap();
        let y = mt::arange(0.0, N as f64, 1.0, DType::F32, p).unwrap();
        // Fused broadcast-free elementwise across the windows, then reductions.
        let z = mt::add(&mt::multiply_scalar(&x, 2.0).unwrap(), &y).unwrap();
        // Past 2^24 f32 spaces integers 4 apart: compare with the GPU's own arange values.
        let end = |t: &mt::Tensor| {
            t.slice(0, Some(N as isize - 3), None, 1).unwrap().to_vec::<f32>().unwrap()
        };
        let (ytail, ztail) = (end(&y), end(&z));
        for (k, i) in (N - 3..N).enumerate() {
            assert!((ytail[k] - i as f32).abs() <= 4.0, "arange[{i}] = {}", ytail[k]);
            assert_eq!(ztail[k], ytail[k] + 2.0, "2*ones + arange at {i}");
        }
        let head = z.slice(0, Some(0), Some(3), 1).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(head, vec![2.0, 3.0, 4.0]);
        let s = mt::sum(&x, None, false).unwrap().to_vec::<f32>().unwrap()[0];
        assert_eq!(s, N as f32, "sum of ones");
        let m = mt::max(&y, None, false).unwrap().to_vec::<f32>().unwrap()[0];
        assert_eq!(m, ytail[2], "max of arange");
        // Row softmax over [N/1000, 1000]: windows of rows.
        let r = mt::softmax(&x.reshape(&[(N / 1000) as isize, 1000]).unwrap(), 1).unwrap();
        let last = r.slice(0, Some((N / 1000) as isize - 1), None, 1).unwrap();
        let v = last.to_vec::<f32>().unwrap();
        assert!(v.iter().all(|&q| (q - 1e-3).abs() < 1e-7), "softmax of a constant row");
    }
}
