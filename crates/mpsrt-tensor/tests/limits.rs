//! Adapter limits: more workgroups than one dispatch dimension allows (2-D grid), and tensors
//! larger than `max_storage_buffer_binding_size` (filled and multiplied in windows).

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, Place};

#[test]
fn dispatch_beyond_65535_workgroups() {
    // Odd size (not a multiple of 4) keeps one element per thread: 16,776,967 threads need
    // 65,536 workgroups of 256, one more than a single dimension may hold.
    let n = 65_535 * 256 + 7;
    let a = mt::arange(0.0, n as f64, 1.0, DType::F32, Place::Cpu).unwrap();
    let b = mt::full(&[n], 0.5, DType::F32, Place::Cpu).unwrap();
    let want = mt::add(&a, &b).unwrap().to_vec::<f32>().unwrap();
    for p in gpus() {
        let got = mt::add(&a.to(p).unwrap(), &b.to(p).unwrap()).unwrap().to_vec::<f32>().unwrap();
        assert!(got == want, "large add differs on {p}");
    }
}

#[test]
fn tensors_beyond_the_binding_limit_work_or_are_refused_clearly() {
    for p in gpus() {
        let dev = mpsrt_runtime::gpu_device(0).unwrap();
        let limit = dev.properties().max_storage_buffer_binding_size;
        if limit > (512 << 20) {
            eprintln!(
                "binding limit {limit} too large to test here; lavapipe (128 MiB) covers it in CI"
            );
            continue;
        }
        // Creation and fills work in windows past one binding (issue 18); the last window's
        // elements are really written.
        let n = limit as usize + 64;
        let t = mt::full(&[n], 7.0, DType::U8, p).expect("a fill past one binding works");
        let tail = t.to(Place::Cpu).unwrap().to_vec::<u8>().unwrap();
        assert_eq!(tail.len(), n);
        assert!(tail[n - 128..].iter().all(|&v| v == 7), "last window written");
        drop((t, tail));
        // A matmul whose A operand alone exceeds a binding: cut into row blocks whose windows
        // fit (issue 18). One output column (the GEMV route) and long rows keep it light on
        // lavapipe: the tiled GEMM pads N to a 64-wide tile (40 s of emulated work here), a
        // GEMV over 16-element rows wastes most threads (20 s).
        let k = 1024;
        let rows = (limit as usize / 4) / k + 16;
        let a = mt::ones(&[rows, k], DType::F32, p).unwrap();
        let b = mt::full(&[k, 1], 0.5, DType::F32, p).unwrap();
        let c = mt::matmul(&a, &b).expect("a GEMM with A past one binding works");
        assert_eq!(c.shape(), &[rows, 1]);
        let last = c.slice(0, Some(rows as isize - 3), None, 1).unwrap();
        assert_eq!(last.to_vec::<f32>().unwrap(), vec![512.0; 3], "last row block computed");
        drop((a, c));
        // The device keeps working.
        let t = mt::ones(&[3], DType::F32, p).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    }
}
