//! The engine's in-place concat primitives (issue 22) at the tensor level, on the GPU
//! (lavapipe in CI): `write_into` a strided channel slice, a conv stored into a channel slice
//! (`with_conv_destination`, whole K and split over K) and a conv reading a channel slice with
//! a gate / a BN-ReLU applied in its gather (`with_conv_input_scale`,
//! `with_conv_input_affine_relu`) — each against the same ops into fresh tensors.

use mpsrt_tensor::{self as mt, Conv2dOptions, ConvPadding, DType, Place, Tensor};

fn gpu() -> bool {
    let ok = mpsrt_runtime::gpu_available();
    assert!(ok || std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    ok
}

fn vals(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + 1.0) * k).sin()).collect()
}

fn t(shape: &[usize], k: f32, place: Place) -> Tensor {
    Tensor::from_slice(&vals(shape.iter().product(), k), shape, place).unwrap()
}

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn slices_of_one_buffer_match_fresh_results() {
    if !gpu() {
        return;
    }
    std::env::set_var("MPSRT_CONV_GEMM", "1");
    let g = Place::Gpu(0);
    // write_into: a strided channel slice of [2, 7, 3, 3]; the rest keeps its values.
    let canvas = t(&[2, 7, 3, 3], 0.3, g);
    let before = v(&canvas);
    let src = t(&[2, 3, 3, 3], 0.7, g);
    mt::write_into(&canvas.slice(1, Some(2), Some(5), 1).unwrap(), &src).unwrap();
    let after = v(&canvas);
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        let (n, c, p) = (i / 63, (i / 9) % 7, i % 9);
        let want = if (2..5).contains(&c) { v(&src)[n * 27 + (c - 2) * 9 + p] } else { *b };
        assert_eq!(*a, want, "element {i}");
    }
    assert!(mt::write_into(&t(&[2, 3], 0.1, Place::Cpu), &t(&[2, 3], 0.2, Place::Cpu)).is_err());

    // A 3×3 conv stored into channels 4..8 of a [2, 12, 8, 8] buffer, as the engine's concat
    // groups do (the implicit GEMM forced: `MPSRT_CONV_GEMM` is read once, this binary's only
    // test sets it first); the rest of the buffer is untouched.
    let opts = Conv2dOptions { padding: ConvPadding::Explicit([1; 4]), ..Default::default() };
    for cin in [8, 32] {
        let x = t(&[2, cin, 8, 8], 0.11, g);
        let w = t(&[4, cin, 3, 3], 0.05, g);
        let fresh = mt::conv2d(&x, &w, None, &opts).unwrap();
        let buf = mt::zeros(&[2, 12, 8, 8], DType::F32, g).unwrap();
        let dst = buf.slice(1, Some(4), Some(8), 1).unwrap();
        let y = mt::with_conv_destination(&dst, || mt::conv2d(&x, &w, None, &opts)).unwrap();
        assert_eq!(y.layout(), dst.layout(), "cin {cin}: not stored into the slice");
        assert_eq!(v(&y), v(&fresh), "cin {cin}: the slice differs from a fresh conv");
        let zeros = v(&buf.slice(1, Some(0), Some(4), 1).unwrap().contiguous().unwrap());
        assert!(zeros.iter().all(|&z| z == 0.0), "cin {cin}: wrote outside its slice");
    }

    // A conv reading channels 2..10 of [2, 12, 8, 8] (strided at batch 2) with a gate and
    // with a BN-ReLU in its gather, against the same ops materialized first.
    let big = t(&[2, 12, 8, 8], 0.21, g);
    let x = big.slice(1, Some(2), Some(10), 1).unwrap();
    let w = t(&[6, 8, 1, 1], 0.09, g);
    let gate = t(&[2, 8, 1, 1], 0.4, g);
    let gated = mt::with_conv_input_scale(&gate, || mt::conv2d(&x, &w, None, &opts1()));
    let want = mt::conv2d(&mt::multiply(&x, &gate).unwrap(), &w, None, &opts1()).unwrap();
    assert_eq!(v(&gated.unwrap()), v(&want), "gated conv of a channel slice");
    let (s, sh) = (t(&[8, 1, 1], 0.6, g), t(&[8, 1, 1], 1.7, g));
    let pre = mt::with_conv_input_affine_relu(&s, &sh, || mt::conv2d(&x, &w, None, &opts1()));
    let act = mt::relu(&mt::add(&mt::multiply(&x, &s).unwrap(), &sh).unwrap()).unwrap();
    let want = mt::conv2d(&act, &w, None, &opts1()).unwrap();
    let (got, want) = (v(&pre.unwrap()), v(&want));
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "BN-ReLU in the gather: {a} vs {b}");
    }
}

fn opts1() -> Conv2dOptions {
    Conv2dOptions::default()
}
