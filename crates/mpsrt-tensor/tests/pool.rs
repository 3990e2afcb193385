//! Pooling on every device against the CPU reference (kernel/stride/padding/dilation/ceil_mode/
//! count_include_pad table, odd sizes, NaN, non-contiguous, f16, 3-D input), the reference against
//! hand-derived values, and the error cases.

mod common;
use common::*;
use mpsrt_tensor::{
    adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, global_avg_pool2d, global_max_pool2d,
    max_pool2d, DType, Place, Pool2dOptions, Tensor,
};

fn ramp(h: usize, w: usize) -> Tensor {
    let v: Vec<f32> = (0..h * w).map(|i| i as f32).collect();
    Tensor::from_slice(&v, &[1, 1, h, w], Place::Cpu).unwrap()
}

#[test]
fn pool_reference_hand_derived() {
    // 4×4 ramp, 2×2 windows: max = bottom-right of each block, avg = block mean.
    let x = ramp(4, 4);
    let o = Pool2dOptions::new(2, 2);
    assert_eq!(max_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![5., 7., 13., 15.]);
    assert_eq!(avg_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![2.5, 4.5, 10.5, 12.5]);
    // 3×3 ramp, k=2 s=2 ceil_mode: windows {0,1,3,4} {2,5} {6,7} {8}.
    let x = ramp(3, 3);
    let o = Pool2dOptions { ceil_mode: true, ..Pool2dOptions::new(2, 2) };
    assert_eq!(max_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![4., 5., 7., 8.]);
    assert_eq!(avg_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![2., 3.5, 6.5, 8.]);
    // padding 1, k=2 s=2, count_include_pad: corner window {0} / 4; excluded: {0} / 1.
    let o = Pool2dOptions { padding: [1, 1], ..Pool2dOptions::new(2, 2) };
    assert_eq!(avg_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![0., 0.75, 2.25, 6.]);
    let o = Pool2dOptions { count_include_pad: false, ..o };
    assert_eq!(avg_pool2d(&x, &o).unwrap().to_vec::<f32>().unwrap(), vec![0., 1.5, 4.5, 6.]);
    // adaptive 3 → 2: windows rows {0,1} {1,2}.
    let y = adaptive_avg_pool2d(&x, [2, 2]).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2., 3., 5., 6.]);
    assert_eq!(global_avg_pool2d(&x).unwrap().to_vec::<f32>().unwrap(), vec![4.]);
    assert_eq!(global_max_pool2d(&x).unwrap().to_vec::<f32>().unwrap(), vec![8.]);
}

fn check(what: &str, cpu: &Tensor, got: &Tensor) {
    assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
    assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
    let (rtol, atol) = if cpu.dtype() == DType::F16 { (2e-3, 1e-3) } else { (1e-5, 1e-6) };
    assert_close(what, &got.to_f64_vec().unwrap(), &cpu.to_f64_vec().unwrap(), rtol, atol);
}

#[test]
fn pool_table_matches_cpu_on_every_device() {
    // (h, w, kernel, stride, padding, dilation, ceil_mode, count_include_pad)
    type Case = (usize, usize, [usize; 2], Option<[usize; 2]>, [usize; 2], [usize; 2], bool, bool);
    let cases: &[Case] = &[
        (7, 9, [3, 3], Some([2, 2]), [1, 1], [1, 1], false, true),
        (7, 9, [3, 3], Some([2, 2]), [1, 1], [1, 1], true, false),
        (8, 11, [2, 3], None, [0, 1], [1, 1], true, true),
        (10, 10, [3, 2], Some([1, 3]), [1, 0], [2, 1], false, true),
        (5, 6, [2, 2], Some([3, 3]), [1, 1], [1, 2], true, false),
        (1, 1, [1, 1], None, [0, 0], [1, 1], false, true),
        (112, 112, [3, 3], Some([2, 2]), [1, 1], [1, 1], false, true), // ResNet stem pool
    ];
    for (i, &(h, w, kernel, stride, padding, dilation, ceil_mode, cip)) in cases.iter().enumerate()
    {
        for dtype in [DType::F32, DType::F16] {
            let n = 2 * 3 * h * w;
            let x = tensor(&values(n, 50 + i as u64, true), &[2, 3, h, w], dtype);
            let o = Pool2dOptions {
                kernel,
                stride,
                padding,
                dilation,
                ceil_mode,
                count_include_pad: cip,
            };
            let cmax = max_pool2d(&x, &o).unwrap();
            let cavg = avg_pool2d(&x, &o).unwrap();
            for p in gpus() {
                let xg = x.to(p).unwrap();
                check(&format!("max case {i} {dtype}"), &cmax, &max_pool2d(&xg, &o).unwrap());
                check(&format!("avg case {i} {dtype}"), &cavg, &avg_pool2d(&xg, &o).unwrap());
            }
        }
    }
}

/// f16 pooling on the GPU (the f16 kernel where the device has shader-f16) against the CPU's
/// f32 pooling of the same (f16-representable) values: max is exact, the average is one f16
/// rounding of the f32 mean (rtol 1e-3); NaN and infinities among the inputs.
#[test]
fn f16_pool_matches_the_f32_cpu_reference() {
    let (h, w) = (23, 30);
    let v = values(2 * 5 * h * w, 77, true);
    let x16 = tensor(&v, &[2, 5, h, w], DType::F16);
    let x32 = x16.astype(DType::F32).unwrap();
    let o = Pool2dOptions { stride: Some([2, 2]), padding: [1, 1], ..Pool2dOptions::new(3, 3) };
    let (cmax, cavg) = (max_pool2d(&x32, &o).unwrap(), avg_pool2d(&x32, &o).unwrap());
    for p in gpus() {
        let xg = x16.to(p).unwrap();
        let (gmax, gavg) = (max_pool2d(&xg, &o).unwrap(), avg_pool2d(&xg, &o).unwrap());
        assert_eq!((gmax.dtype(), gavg.dtype()), (DType::F16, DType::F16));
        let f = |t: &Tensor| t.to_f64_vec().unwrap();
        assert_close("f16 max pool", &f(&gmax), &f(&cmax), 0.0, 0.0);
        assert_close("f16 avg pool", &f(&gavg), &f(&cavg), 1e-3, 1e-4);
    }
}

/// The f16 max pool's vector form (`MPSRT_POOL_F16_VEC=1`: four outputs per thread from
/// aligned `vec4<f16>` loads) against the f32 CPU pool, with NaN and infinities: ResNet's
/// padded 3×3/2 window, and an unpadded dilated 2×3 one (rows multiples of 4).
#[test]
fn f16_vector_max_pool_matches_the_f32_cpu_reference() {
    std::env::set_var("MPSRT_POOL_F16_VEC", "1");
    let opts = [
        Pool2dOptions { stride: Some([2, 2]), padding: [1, 1], ..Pool2dOptions::new(3, 3) },
        Pool2dOptions { stride: Some([1, 1]), dilation: [1, 2], ..Pool2dOptions::new(2, 3) },
    ];
    for (i, (o, w)) in opts.iter().zip([32, 20]).enumerate() {
        let x16 = tensor(&values(2 * 3 * 9 * w, 91 + i as u64, true), &[2, 3, 9, w], DType::F16);
        let cmax = max_pool2d(&x16.astype(DType::F32).unwrap(), o).unwrap();
        assert_eq!(cmax.shape()[3] % 4, 0, "case {i}: the vector form applies");
        for p in gpus() {
            let g = max_pool2d(&x16.to(p).unwrap(), o).unwrap();
            let f = |t: &Tensor| t.to_f64_vec().unwrap();
            assert_close(&format!("f16 vector max pool {i}"), &f(&g), &f(&cmax), 0.0, 0.0);
        }
    }
    std::env::remove_var("MPSRT_POOL_F16_VEC");
}

#[test]
fn adaptive_global_noncontiguous_and_3d() {
    let x = tensor(&values(2 * 5 * 7 * 9, 3, false), &[2, 9, 5, 7], DType::F32)
        .permute(&[0, 2, 3, 1])
        .unwrap()
        .permute(&[0, 3, 1, 2])
        .unwrap()
        .transpose(2, 3)
        .unwrap(); // (2, 9, 7, 5), non-contiguous
    assert!(!x.is_contiguous());
    let sizes = [[3, 2], [7, 5], [1, 1], [4, 4], [10, 3]];
    for s in sizes {
        let ca = adaptive_avg_pool2d(&x, s).unwrap();
        let cm = adaptive_max_pool2d(&x, s).unwrap();
        for p in gpus() {
            let xg = tensor(&values(2 * 5 * 7 * 9, 3, false), &[2, 9, 5, 7], DType::F32)
                .to(p)
                .unwrap()
                .transpose(2, 3)
                .unwrap();
            assert!(!xg.is_contiguous());
            check("adaptive avg", &ca, &adaptive_avg_pool2d(&xg, s).unwrap());
            check("adaptive max", &cm, &adaptive_max_pool2d(&xg, s).unwrap());
        }
    }
    let x3 = tensor(&values(3 * 6 * 6, 4, true), &[3, 6, 6], DType::F32);
    let c = global_avg_pool2d(&x3).unwrap();
    assert_eq!(c.shape(), [3, 1, 1]);
    let m = max_pool2d(&x3, &Pool2dOptions::new(3, 3)).unwrap();
    assert_eq!(m.shape(), [3, 2, 2]);
    for p in gpus() {
        let g = x3.to(p).unwrap();
        check("global avg 3-D", &c, &global_avg_pool2d(&g).unwrap());
        check("global max 3-D", &global_max_pool2d(&x3).unwrap(), &global_max_pool2d(&g).unwrap());
        check("max 3-D", &m, &max_pool2d(&g, &Pool2dOptions::new(3, 3)).unwrap());
    }
}

#[test]
fn pool_errors() {
    for p in devices() {
        let x = tensor(&values(2 * 3 * 4 * 4, 1, false), &[2, 3, 4, 4], DType::F32).to(p).unwrap();
        let e = max_pool2d(&x, &Pool2dOptions::new(5, 5)).unwrap_err().to_string();
        assert!(e.contains("max_pool2d") && e.contains("larger"), "{e}");
        let o = Pool2dOptions { padding: [2, 2], ..Pool2dOptions::new(3, 3) };
        let e = avg_pool2d(&x, &o).unwrap_err().to_string();
        assert!(e.contains("avg_pool2d") && e.contains("half"), "{e}");
        let o = Pool2dOptions { stride: Some([0, 1]), ..Pool2dOptions::new(2, 2) };
        assert!(max_pool2d(&x, &o).is_err());
        let e =
            max_pool2d(&x.flatten(0, 1).unwrap().flatten(0, 1).unwrap(), &Pool2dOptions::new(2, 2));
        assert!(e.unwrap_err().to_string().contains("4-D"));
        assert!(adaptive_avg_pool2d(&x, [0, 2]).is_err());
        assert!(max_pool2d(&x.astype(DType::I32).unwrap(), &Pool2dOptions::new(2, 2)).is_err());
    }
}

/// The CPU max pool (rows reduced first, then columns) against a window-by-window scan written
/// here, over kernel / stride / padding / dilation / ceil_mode cases, with a NaN and infinities
/// in the input, in f32 and f64.
#[test]
fn cpu_max_pool_matches_a_brute_force_scan() {
    // (h, w, kernel, stride, padding, dilation, ceil_mode)
    let cases = [
        (112, 112, [3, 3], [2, 2], [1, 1], [1, 1], false), // the ResNet/DenseNet stem
        (9, 11, [3, 2], [2, 3], [1, 1], [1, 1], true),
        (7, 8, [2, 3], [1, 1], [0, 1], [2, 1], false),
        (5, 5, [5, 5], [1, 1], [2, 2], [1, 1], false),
        (6, 4, [1, 1], [2, 1], [0, 0], [1, 1], true),
    ];
    for (i, &(h, w, kernel, stride, padding, dilation, ceil_mode)) in cases.iter().enumerate() {
        let (n, c) = (2, 3);
        let mut v = values(n * c * h * w, 300 + i as u64, false);
        v[7] = f64::NAN;
        v[h * w + 1] = f64::INFINITY;
        v[2 * h * w + 2] = f64::NEG_INFINITY;
        let o = Pool2dOptions {
            kernel,
            stride: Some(stride),
            padding,
            dilation,
            ceil_mode,
            count_include_pad: true,
        };
        let out_len = |len: usize, a: usize| {
            let span = len + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1;
            let mut o = if ceil_mode { span.div_ceil(stride[a]) } else { span / stride[a] } + 1;
            // PyTorch: the last window must start inside the input or the left padding.
            if ceil_mode && (o - 1) * stride[a] >= len + padding[a] {
                o -= 1;
            }
            o
        };
        let (oh, ow) = (out_len(h, 0), out_len(w, 1));
        let mut want = Vec::new();
        for p in 0..n * c {
            for y in 0..oh {
                for x in 0..ow {
                    let mut m = f64::NEG_INFINITY;
                    for ky in 0..kernel[0] {
                        for kx in 0..kernel[1] {
                            let r =
                                (y * stride[0] + ky * dilation[0]) as isize - padding[0] as isize;
                            let q =
                                (x * stride[1] + kx * dilation[1]) as isize - padding[1] as isize;
                            if r >= 0 && q >= 0 && (r as usize) < h && (q as usize) < w {
                                let e = v[p * h * w + r as usize * w + q as usize];
                                m = if e.is_nan() || m.is_nan() { f64::NAN } else { m.max(e) };
                            }
                        }
                    }
                    want.push(m);
                }
            }
        }
        for dtype in [DType::F32, DType::F64] {
            let x = tensor(&v, &[n, c, h, w], dtype);
            let got = max_pool2d(&x, &o).unwrap();
            assert_eq!(got.shape(), [n, c, oh, ow], "case {i} {dtype}");
            let got = got.to_f64_vec().unwrap();
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let same = (g.is_nan() && w.is_nan())
                    || g == w
                    || (*g as f32 as f64) == (*w as f32 as f64);
                assert!(same, "case {i} {dtype} [{k}]: {g} vs {w}");
            }
        }
    }
}
