//! `masked_softmax` (issue 23): the one-pass GPU kernel (`softmax(x · scale + mask)`, zeros for
//! rows whose maximum is `-inf`) against the CPU composition, which is itself checked against
//! plain f64 loops here. Cases: BERT's padding mask `[B, 1, 1, S]` with fully masked rows,
//! per-query masks, a dense mask, bool masks, no mask, odd row lengths (scalar units), scores
//! that are views (made contiguous), a row past the kernel's 1024 units (the composition),
//! with 1, 2, 4, 8, 32 and 128 threads per row.

mod common;

use mpsrt_tensor::{masked_softmax, DType, Place, Tensor};

fn t(shape: &[usize], seed: u64, place: Place) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = common::values(n, seed, false).into_iter().map(|v| v as f32 * 4.0).collect();
    Tensor::from_slice(&v, shape, Place::Cpu).unwrap().to(place).unwrap()
}

/// A float mask of `shape`: 0 or `-inf` (every `period`-th key masked), and whole rows masked
/// where `dead_row(row)`.
fn mask(shape: &[usize], period: usize, dead_row: impl Fn(usize) -> bool) -> Vec<f32> {
    let l = *shape.last().unwrap();
    let n: usize = shape.iter().product();
    (0..n)
        .map(|i| {
            let (row, j) = (i / l, i % l);
            if dead_row(row) || j % period == period - 1 {
                f32::NEG_INFINITY
            } else if j % 5 == 0 {
                -3.0
            } else {
                0.0
            }
        })
        .collect()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to(Place::Cpu).unwrap().astype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// Plain loops: `x` contiguous `[rows, l]`, `m` the mask already broadcast to it.
fn reference(x: &[f32], m: Option<&[f32]>, l: usize, scale: f64) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for (r, row) in x.chunks(l).enumerate() {
        let s: Vec<f64> = (0..l)
            .map(|j| row[j] as f64 * scale + m.map_or(0.0, |m| m[r * l + j] as f64))
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if mx == f64::NEG_INFINITY {
            continue;
        }
        let sum: f64 = s.iter().map(|v| (v - mx).exp()).sum();
        for j in 0..l {
            y[r * l + j] = (s[j] - mx).exp() / sum;
        }
    }
    y
}

fn close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((*a as f64 - b).abs() <= 2e-6, "{what} [{i}]: {a} vs {b}");
    }
}

#[test]
fn one_pass_kernel_matches_the_composition_and_loops() {
    // (scores shape, mask shape or None, scale)
    type Case<'a> = (&'a [usize], Option<&'a [usize]>, f64);
    let cases: &[Case] = &[
        (&[2, 3, 16, 128], Some(&[2, 1, 1, 128]), 0.125),
        (&[2, 2, 5, 24], Some(&[2, 1, 5, 24]), 0.5),
        (&[3, 4, 33], Some(&[3, 4, 33]), 1.0),
        (&[2, 3, 7, 9], Some(&[1, 1, 7, 9]), 0.3),
        (&[4, 1000], None, 0.01),
        (&[2, 4096], Some(&[4096]), 0.25),
        // Past the kernel's 1024 vec4s: the composition on every place.
        (&[2, 4100], Some(&[2, 1]), 1.0),
    ];
    let mut places = vec![Place::Cpu];
    places.extend(common::gpus());
    for &(shape, mshape, scale) in cases {
        let l = *shape.last().unwrap();
        let x = t(shape, 7, Place::Cpu);
        let m = mshape.map(|ms| {
            // Row 1 of the broadcast mask is fully masked (when it has one).
            let v = mask(ms, 7, |r| r == 1 && ms.len() > 1 && ms[ms.len() - 2] > 1);
            Tensor::from_slice(&v, ms, Place::Cpu).unwrap()
        });
        let mb = m.as_ref().map(|m| host(&m.expand(shape).unwrap().contiguous().unwrap()));
        let want = reference(&host(&x), mb.as_deref(), l, scale);
        for &place in &places {
            let (x, m) = (x.to(place).unwrap(), m.as_ref().map(|m| m.to(place).unwrap()));
            let y = masked_softmax(&x, scale, m.as_ref()).unwrap();
            assert_eq!(y.shape(), shape);
            close(&host(&y), &want, &format!("{shape:?} {place:?}"));
        }
    }
}

#[test]
fn bool_masks_views_and_odd_rows() {
    let mut places = vec![Place::Cpu];
    places.extend(common::gpus());
    // Scores as a transposed view ([2, 3, 11, 10] from [2, 3, 10, 11]); a bool mask [2, 1, 11, 10].
    let base = t(&[2, 3, 10, 11], 3, Place::Cpu);
    let x = base.transpose(-1, -2).unwrap();
    let keep: Vec<bool> = (0..2 * 11 * 10).map(|i| i % 3 != 0 && i / 10 != 4).collect();
    let kf: Vec<f32> = keep.iter().map(|&k| k as u8 as f32).collect();
    let kf = Tensor::from_slice(&kf, &[2, 1, 11, 10], Place::Cpu).unwrap();
    let mb = mpsrt_tensor::greater_scalar(&kf, mpsrt_tensor::Scalar::F(0.5)).unwrap();
    assert_eq!(mb.dtype(), DType::Bool);
    let fm: Vec<f32> = keep.iter().map(|&k| if k { 0.0 } else { f32::NEG_INFINITY }).collect();
    let fm = Tensor::from_slice(&fm, &[2, 1, 11, 10], Place::Cpu).unwrap();
    let fmb = host(&fm.expand(&[2, 3, 11, 10]).unwrap().contiguous().unwrap());
    let want = reference(&host(&x.contiguous().unwrap()), Some(&fmb), 10, 0.7);
    for &place in &places {
        let (x, mb) = (x.to(place).unwrap(), mb.to(place).unwrap());
        let y = masked_softmax(&x, 0.7, Some(&mb)).unwrap();
        close(&host(&y), &want, &format!("{place:?}"));
    }
}

#[test]
fn bad_masks_and_inputs_name_the_op() {
    let x = t(&[2, 8], 1, Place::Cpu);
    let m = t(&[3, 8], 2, Place::Cpu);
    let e = masked_softmax(&x, 1.0, Some(&m)).unwrap_err().to_string();
    assert!(e.contains("masked_softmax") && e.contains("broadcast"), "{e}");
    let i = Tensor::from_slice(&[1i32, 2], &[2], Place::Cpu).unwrap();
    let e = masked_softmax(&i, 1.0, None).unwrap_err().to_string();
    assert!(e.contains("float"), "{e}");
}
