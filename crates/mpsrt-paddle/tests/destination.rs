//! `mpsrt_tensor::with_destination`, which the plugin's `direct` kernels use to compute straight
//! into Paddle's output memory: the launch writes exactly its window of a larger buffer, and
//! destinations it must not use (sharing an input's buffer, misaligned) fall back to a fresh
//! result with the same values.

use mpsrt_core::{DType, Layout, Place};
use mpsrt_runtime::Storage;
use mpsrt_tensor::{self as mt, Tensor};
use std::sync::Arc;

fn gpu() -> Option<Place> {
    if mpsrt_runtime::gpu_available() {
        Some(Place::Gpu(0))
    } else {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
        None
    }
}

/// A `[2, 8]` f32 view at element `offset` of `big`.
fn window(big: &Tensor, offset: usize) -> Tensor {
    let layout = Layout { offset, ..Layout::contiguous(&[2, 8]) };
    Tensor::from_storage(big.storage().clone(), layout, DType::F32).unwrap()
}

fn same_memory(a: &Tensor, b: &Tensor) -> bool {
    match (a.storage(), b.storage()) {
        (Storage::Gpu(x), Storage::Gpu(y)) => {
            Arc::ptr_eq(x, y) && a.layout().offset == b.layout().offset
        }
        _ => false,
    }
}

fn vals(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| i as f32 * k - 3.0).collect()
}

#[test]
fn writes_into_the_window_only() {
    let Some(p) = gpu() else { return };
    let big = mt::zeros(&[256], DType::F32, p).unwrap();
    let dst = window(&big, 64); // byte 256: a bindable offset
    let a = Tensor::from_slice(&vals(16, 0.5), &[2, 8], p).unwrap();
    let b = Tensor::from_slice(&vals(16, 2.0), &[2, 8], p).unwrap();
    let r = mt::with_destination(&dst, || mt::add(&a, &b)).unwrap();
    assert!(same_memory(&r, &dst), "the add did not land in the destination");
    let got: Vec<f32> = big.to_vec().unwrap();
    let want: Vec<f32> = vals(16, 0.5).iter().zip(vals(16, 2.0)).map(|(x, y)| x + y).collect();
    assert_eq!(&got[64..80], &want[..]);
    assert!(got[..64].iter().chain(&got[80..]).all(|&v| v == 0.0), "wrote outside its window");
    // Outside the scope the destination is forgotten.
    let r2 = mt::add(&a, &b).unwrap();
    assert!(!same_memory(&r2, &dst));
}

#[test]
fn unusable_destinations_fall_back() {
    let Some(p) = gpu() else { return };
    let big = mt::zeros(&[256], DType::F32, p).unwrap();
    let b = Tensor::from_slice(&vals(16, 2.0), &[2, 8], p).unwrap();
    // An input in the destination's buffer (wgpu cannot bind it read-only and read-write).
    let a = window(&big, 0);
    let r = mt::with_destination(&window(&big, 64), || mt::add(&a, &b)).unwrap();
    assert!(!same_memory(&r, &window(&big, 64)));
    assert_eq!(r.to_vec::<f32>().unwrap(), vals(16, 2.0));
    // A destination off the 256-byte binding grid.
    let a = Tensor::from_slice(&vals(16, 0.5), &[2, 8], p).unwrap();
    let r = mt::with_destination(&window(&big, 65), || mt::add(&a, &b)).unwrap();
    assert!(!same_memory(&r, &window(&big, 65)));
    // A composite op: its first matching launch may use the destination; the final value is
    // right either way (the caller copies it into place when it landed elsewhere).
    let dst = window(&big, 128);
    let r = mt::with_destination(&dst, || mt::add_scalar(&mt::multiply(&a, &b)?, 1.0)).unwrap();
    let want: Vec<f32> =
        vals(16, 0.5).iter().zip(vals(16, 2.0)).map(|(x, y)| x * y + 1.0).collect();
    assert_eq!(r.to_vec::<f32>().unwrap(), want);
}
