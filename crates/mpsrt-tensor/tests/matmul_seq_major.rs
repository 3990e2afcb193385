//! `matmul_seq_major`: `[B, H, M, K] @ [B, H, K, N]` returned as the `[B, H, M, N]` view of a
//! `[B, M, H, N]` buffer (attention's `p·v` written sequence-major). Values against the plain
//! `matmul` on the CPU, and the layout, on the CPU and the GPU: the tiled GEMM's strided store
//! (vec4 and scalar stores; a `v` that is BERT's head view of a merged Q/K/V projection) and
//! the permuted fallback (a product the plan splits along K).

mod common;

use mpsrt_tensor::{matmul, matmul_seq_major, Place, Tensor};

fn t(shape: &[usize], seed: u64, place: Place) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = common::values(n, seed, false).into_iter().map(|v| v as f32).collect();
    Tensor::from_slice(&v, shape, Place::Cpu).unwrap().to(place).unwrap()
}

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    } else {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    }
    v
}

#[test]
fn seq_major_product_matches_matmul() {
    // (B, H, M, K, N, v as a head view of [B, K, 3·H·N]).
    let cases = [
        (2, 3, 32, 16, 8, false),
        (2, 2, 20, 12, 6, false),
        (2, 4, 32, 32, 16, true),
        (1, 1, 24, 4096, 32, false),
    ];
    for (b, h, m, k, n, merged) in cases {
        let mk_v = |place| {
            if merged {
                // BERT's V: the last third of the merged projection, split into heads.
                let x = t(&[b, k, 3 * h * n], 2, place);
                let v = x.slice(2, Some((2 * h * n) as isize), None, 1).unwrap();
                let v = v.reshape(&[b as isize, k as isize, h as isize, n as isize]).unwrap();
                v.permute(&[0, 2, 1, 3]).unwrap()
            } else {
                t(&[b, h, k, n], 2, place)
            }
        };
        let want = matmul(&t(&[b, h, m, k], 1, Place::Cpu), &mk_v(Place::Cpu)).unwrap();
        let want = want.to_f64_vec().unwrap();
        for place in places() {
            let (a, v) = (t(&[b, h, m, k], 1, place), mk_v(place));
            let y = matmul_seq_major(&a, &v).unwrap();
            let case = format!("{place:?} {:?}", (b, h, m, k, n, merged));
            assert_eq!(y.shape(), &[b, h, m, n], "{case}");
            let got = y.to_f64_vec().unwrap();
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            let tol = 1e-5 * (k as f64).sqrt();
            assert!(err < tol, "{case}: max abs error {err}");
            // `[B, M, H, N]` storage: the merge after it is a view.
            let merged_heads = y.permute(&[0, 2, 1, 3]).unwrap();
            assert!(merged_heads.is_contiguous(), "{case}: strides {:?}", y.strides());
        }
    }
    assert!(matmul_seq_major(&t(&[2, 3, 4], 1, Place::Cpu), &t(&[2, 4, 5], 2, Place::Cpu)).is_err());
}
