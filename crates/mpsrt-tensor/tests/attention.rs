//! Fused attention against the unfused formula built from separate tensor ops on the CPU
//! (`matmul`, `+ mask`, `softmax`, `matmul`), on every device: odd sequence lengths (partial
//! query blocks and key tiles), several heads, grouped-query heads, causal bounds with an
//! offset, additive and bool masks broadcast from lower ranks, f16 I/O (even and odd head
//! sizes), packed-head views with the seq-major output, a row with nothing to attend (zeros),
//! and argument errors. Tolerances: f32 1e-4 absolute on outputs of magnitude ≤ 1 (f32
//! accumulation in a different order); f16 3e-3 (one f16 rounding of the output, 2^-11
//! relative, plus f32-vs-f64 arithmetic).

mod common;

use common::{devices, rnd, tensor};
use mpsrt_tensor::{self as t, scaled_dot_product_attention as sdpa, DType, Place, SdpaOptions};
use mpsrt_tensor::{Scalar, Tensor};

/// The unfused reference on the CPU in f32: kv heads repeated for grouped queries, scores
/// scaled, mask and causal bias added, softmax, product with v.
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, o: SdpaOptions) -> Tensor {
    let f = |x: &Tensor| x.to(Place::Cpu).unwrap().astype(DType::F32).unwrap();
    let (q, k, v) = (f(q), f(k), f(v));
    let (b, hq, sq) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (hkv, skv) = (k.shape()[1], k.shape()[2]);
    let rep = |x: &Tensor| {
        let s = x.shape().to_vec();
        x.unsqueeze(2)
            .unwrap()
            .expand(&[s[0], s[1], hq / hkv, s[2], s[3]])
            .unwrap()
            .reshape(&[s[0] as isize, hq as isize, s[2] as isize, s[3] as isize])
            .unwrap()
    };
    let scores = t::matmul(&q, &rep(&k).transpose(-1, -2).unwrap()).unwrap();
    let mut s = t::multiply_scalar(&scores, Scalar::F(o.scale)).unwrap();
    if let Some(m) = mask {
        let m = m.to(Place::Cpu).unwrap();
        let m = if m.dtype() == DType::Bool {
            t::where_scalar(&m, Scalar::F(0.0), Scalar::F(f64::NEG_INFINITY), DType::F32).unwrap()
        } else {
            m.astype(DType::F32).unwrap()
        };
        s = t::add(&s, &m).unwrap();
    }
    if let Some(off) = o.causal_offset {
        let bias: Vec<f64> = (0..sq * skv)
            .map(
                |e| if (e % skv) as i64 > (e / skv) as i64 + off { f64::NEG_INFINITY } else { 0.0 },
            )
            .collect();
        s = t::add(&s, &tensor(&bias, &[sq, skv], DType::F32)).unwrap();
    }
    let p = t::softmax(&s, -1).unwrap();
    let y = t::matmul(&p, &rep(&v)).unwrap();
    let y = if o.seq_major { y.permute(&[0, 2, 1, 3]).unwrap() } else { y };
    let _ = b;
    y.contiguous().unwrap()
}

fn opts(d: usize, causal: Option<i64>) -> SdpaOptions {
    SdpaOptions { scale: 1.0 / (d as f64).sqrt(), causal_offset: causal, seq_major: false }
}

fn check(what: &str, got: &Tensor, want: &Tensor, atol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g = got.astype(DType::F32).unwrap().to_f64_vec().unwrap();
    let w = want.to_f64_vec().unwrap();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= atol, "{what}: element {i}: got {a}, want {b}");
    }
}

/// Values in ±1 so that scores stay O(1) for every head size.
fn r(shape: &[usize], seed: u64, dt: DType) -> Tensor {
    let x = rnd(shape, seed, DType::F32);
    t::multiply_scalar(&x, Scalar::F(0.25)).unwrap().astype(dt).unwrap()
}

#[test]
fn fused_matches_unfused_on_every_device() {
    // (b, hq, hkv, sq, skv, d, dv, causal offset, mask shape or none, dtype)
    type Case =
        (usize, usize, usize, usize, usize, usize, usize, Option<i64>, Option<Vec<usize>>, DType);
    let cases: Vec<Case> = vec![
        (2, 3, 3, 5, 7, 8, 8, None, None, DType::F32),
        (1, 2, 2, 19, 19, 64, 64, Some(0), None, DType::F32),
        (2, 2, 2, 9, 37, 40, 24, None, Some(vec![2, 1, 1, 37]), DType::F32),
        (2, 4, 2, 5, 8, 16, 16, Some(3), Some(vec![2, 4, 5, 8]), DType::F32),
        (1, 2, 2, 33, 33, 64, 64, Some(0), Some(vec![33, 33]), DType::F16),
        (1, 1, 1, 6, 11, 7, 7, None, None, DType::F16),
        (1, 2, 1, 17, 70, 128, 96, None, Some(vec![1, 1, 1, 70]), DType::F32),
        // Several 64-key chunks and 32-row blocks (the register-tiled kernel's online softmax).
        (2, 2, 1, 40, 150, 64, 32, Some(100), Some(vec![2, 1, 1, 150]), DType::F32),
        (1, 3, 3, 70, 130, 32, 64, None, Some(vec![1, 1, 70, 130]), DType::F16),
    ];
    for place in devices() {
        for (n, (b, hq, hkv, sq, skv, d, dv, causal, mshape, dt)) in
            cases.iter().cloned().enumerate()
        {
            let s = n as u64 * 10;
            let q = r(&[b, hq, sq, d], s + 1, dt);
            let k = r(&[b, hkv, skv, d], s + 2, dt);
            let v = r(&[b, hkv, skv, dv], s + 3, dt);
            // Additive masks: small values, a -1e4 "padding" column and a -inf one.
            let mask = mshape.map(|ms| {
                let numel: usize = ms.iter().product();
                let last = *ms.last().unwrap();
                let vals: Vec<f64> = common::values(numel, s + 4, false)
                    .iter()
                    .enumerate()
                    .map(|(e, x)| match e % last {
                        j if j == last - 1 => -1e4,
                        j if j == last - 2 && last > 2 => f64::NEG_INFINITY,
                        _ => x * 0.1,
                    })
                    .collect();
                tensor(&vals, &ms, DType::F32)
            });
            let o = opts(d, causal);
            let want = reference(&q, &k, &v, mask.as_ref(), o);
            let mv = |x: &Tensor| x.to(place).unwrap();
            let got = sdpa(&mv(&q), &mv(&k), &mv(&v), mask.as_ref().map(mv).as_ref(), o).unwrap();
            assert_eq!(got.dtype(), dt);
            let atol = if dt == DType::F16 { 3e-3 } else { 1e-4 };
            check(&format!("case {n} on {place:?}"), &got, &want, atol);
        }
    }
}

#[test]
fn packed_heads_bool_masks_and_empty_rows() {
    for place in devices() {
        // q/k/v as [B, S, H, D] views (the packed-head layout), output seq-major.
        let (b, s, h, d) = (2, 21, 3, 32);
        let pk = |seed| r(&[b, s, h, d], seed, DType::F32).to(place).unwrap();
        let (q, k, v) = (pk(1), pk(2), pk(3));
        let view = |x: &Tensor| x.permute(&[0, 2, 1, 3]).unwrap();
        let o = SdpaOptions { seq_major: true, ..opts(d, Some(0)) };
        let got = sdpa(&view(&q), &view(&k), &view(&v), None, o).unwrap();
        assert_eq!(got.shape(), &[b, s, h, d]);
        check("seq-major", &got, &reference(&view(&q), &view(&k), &view(&v), None, o), 1e-4);
        // A bool key-padding mask [B, 1, 1, S]; batch 1's row... every key masked in batch 1.
        let keep: Vec<bool> = (0..b * s).map(|e| e / s == 0 && e % s < 15).collect();
        let m = Tensor::from_bools(&keep, &[b, 1, 1, s], place).unwrap();
        let o = opts(d, None);
        let got = sdpa(&view(&q), &view(&k), &view(&v), Some(&m), o).unwrap();
        let g = got.to_f64_vec().unwrap();
        let half = g.len() / 2;
        assert!(g[half..].iter().all(|&x| x == 0.0), "rows with no key must be zeros");
        let want = reference(&view(&q), &view(&k), &view(&v), Some(&m), o);
        let w = want.to_f64_vec().unwrap();
        for (i, (a, b)) in g[..half].iter().zip(&w[..half]).enumerate() {
            assert!((a - b).abs() <= 1e-4, "bool mask on {place:?}: element {i}: {a} vs {b}");
        }
    }
}

#[test]
fn argument_errors_name_the_op() {
    let q = r(&[1, 2, 3, 4], 1, DType::F32);
    let k = r(&[1, 2, 5, 4], 2, DType::F32);
    let bad_v = r(&[1, 2, 6, 4], 3, DType::F32);
    let e = sdpa(&q, &k, &bad_v, None, opts(4, None)).unwrap_err();
    assert!(e.to_string().contains("scaled_dot_product_attention"), "{e}");
    let k3 = r(&[1, 3, 5, 4], 2, DType::F32);
    assert!(sdpa(&q, &k3, &k3, None, opts(4, None)).is_err(), "2 q heads over 3 kv heads");
    let qi = q.astype(DType::I32).unwrap();
    assert!(sdpa(&qi, &k, &k, None, opts(4, None)).is_err(), "int inputs");
    let m = r(&[4, 5], 4, DType::F32);
    assert!(sdpa(&q, &k, &k, Some(&m), opts(4, None)).is_err(), "mask [4, 5] vs [.., 3, 5]");
}

/// Which f16 problems take the matrix-unit kernel (issue 23): lavapipe has no matrix units, so
/// the choice is tested against fake device properties; its numerics are checked on a GPU with
/// them (BERT-base f16 vs the composed attention and f32, `bench/results/…/bert`).
#[test]
fn cooperative_attention_choice() {
    use mpsrt_runtime::{CoopMatrixConfig, DeviceProperties};
    if common::gpus().is_empty() {
        return;
    }
    let real = mpsrt_runtime::gpu_device(0).unwrap().properties().clone();
    let nv = |p: &DeviceProperties| {
        let mut p = p.clone();
        p.coop_matrix =
            vec![CoopMatrixConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
        (p.subgroup_min_size, p.subgroup_max_size) = (32, 32);
        (p.shader_f16, p.subgroups) = (true, true);
        p.max_compute_workgroup_storage_size = 49152;
        p
    };
    let p = nv(&real);
    // BERT-base: [b, h, hkv, sq, skv, d, dv].
    let bert = [8, 12, 12, 128, 128, 64, 64];
    let s =
        t::sdpa_coop_plan(&p, bert, true, Some(DType::F16), true, (2, 128)).expect("BERT takes it");
    assert_eq!((s.ch, s.sgs, s.subgroup, s.one_chunk), (128, 2, 32, true));
    let s = t::sdpa_coop_plan(&p, bert, true, None, true, (1, 64)).unwrap();
    assert_eq!((s.ch, s.sgs, s.one_chunk), (64, 1, false));
    // Declined: switched off, unaligned layouts, query or key lengths not multiples of 16,
    // head 72, no 16×16 f16→f32 configuration, a varying subgroup size.
    assert!(t::sdpa_coop_plan(&p, bert, true, None, false, (2, 128)).is_none());
    assert!(t::sdpa_coop_plan(&p, bert, false, None, true, (2, 128)).is_none());
    assert!(
        t::sdpa_coop_plan(&p, [1, 2, 2, 127, 128, 64, 64], true, None, true, (2, 128)).is_none()
    );
    assert!(t::sdpa_coop_plan(&p, [1, 2, 2, 8, 128, 64, 64], true, None, true, (2, 128)).is_none());
    assert!(
        t::sdpa_coop_plan(&p, [1, 2, 2, 128, 100, 64, 64], true, None, true, (2, 128)).is_none()
    );
    assert!(
        t::sdpa_coop_plan(&p, [1, 2, 2, 128, 128, 72, 64], true, None, true, (2, 128)).is_none()
    );
    let mut no_units = p.clone();
    no_units.coop_matrix.clear();
    assert!(t::sdpa_coop_plan(&no_units, bert, true, None, true, (2, 128)).is_none());
    let mut varying = p.clone();
    varying.subgroup_max_size = 64;
    assert!(t::sdpa_coop_plan(&varying, bert, true, None, true, (2, 128)).is_none());
    // This device as it is (lavapipe: no matrix units) keeps the scalar kernel.
    if real.coop_matrix.is_empty() {
        assert!(t::sdpa_coop_plan(&real, bert, true, None, true, (2, 128)).is_none());
        let x = r(&[1, 2, 32, 64], 1, DType::F16).to(Place::Gpu(0)).unwrap();
        assert!(!t::sdpa_on_matrix_units(&x, &x, &x, None));
    }
}
