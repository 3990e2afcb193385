//! Data-moving shape ops on every device against the CPU reference (many dtypes incl. packed
//! f16/u8/bool, zero-size parts, non-contiguous inputs, negative indices/pads), the reference
//! against hand-derived values, and the error cases.

mod common;
use common::*;
use mpsrt_tensor::{
    concat, gather, index_select, pad, split, split_into, stack, tile, DType, PadMode, Place,
    Tensor,
};

fn iota(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
    tensor(&v, shape, dtype)
}

fn same(what: &str, cpu: &Tensor, got: &Tensor) {
    assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
    assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
    assert_eq!(
        got.to_bytes().unwrap(),
        cpu.to_bytes().unwrap(),
        "{what}: values {:?} vs {:?}",
        got.to_f64_vec().unwrap(),
        cpu.to_f64_vec().unwrap()
    );
}

fn f(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

#[test]
fn shape_reference_hand_derived() {
    let a = iota(&[2, 2], DType::F32);
    let b = iota(&[2, 1], DType::I32);
    let c = concat(&[&a, &b], 1).unwrap();
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(f(&c), vec![0., 1., 0., 2., 3., 1.]);
    let s = stack(&[&a, &a], 1).unwrap();
    assert_eq!(s.shape(), [2, 2, 2]);
    assert_eq!(f(&s), vec![0., 1., 0., 1., 2., 3., 2., 3.]);
    let x = iota(&[5], DType::I64);
    let idx = Tensor::from_slice(&[-1i64, 0, 2, 4], &[2, 2], Place::Cpu).unwrap();
    let g = gather(&x, &idx, 0).unwrap();
    assert_eq!(g.shape(), [2, 2]);
    assert_eq!(g.to_vec::<i64>().unwrap(), vec![4, 0, 2, 4]);
    let p = pad(&iota(&[3], DType::F32), &[(2, 2)], PadMode::Reflect).unwrap();
    assert_eq!(f(&p), vec![2., 1., 0., 1., 2., 1., 0.]);
    let p = pad(&iota(&[3], DType::F32), &[(2, 1)], PadMode::Edge).unwrap();
    assert_eq!(f(&p), vec![0., 0., 0., 1., 2., 2.]);
    let p = pad(&iota(&[4], DType::F32), &[(-1, 2)], PadMode::Constant(9.0)).unwrap();
    assert_eq!(f(&p), vec![1., 2., 3., 9., 9.]);
    let t = tile(&iota(&[2], DType::F32), &[2, 2]).unwrap();
    assert_eq!(t.shape(), [2, 4]);
    assert_eq!(f(&t), vec![0., 1., 0., 1., 0., 1., 0., 1.]);
    let parts = split_into(&iota(&[5], DType::F32), 2, 0).unwrap();
    assert_eq!((f(&parts[0]), f(&parts[1])), (vec![0., 1., 2.], vec![3., 4.]));
}

#[test]
fn concat_stack_split_match_cpu() {
    for dtype in [DType::F32, DType::F16, DType::I32, DType::U8, DType::Bool, DType::I8] {
        let a = tensor(&values(2 * 3 * 5, 1, false), &[2, 3, 5], dtype);
        let b = tensor(&values(2 * 4 * 5, 2, false), &[2, 4, 5], dtype);
        let e = tensor(&[], &[2, 0, 5], dtype);
        let t = tensor(&values(2 * 5 * 3, 3, false), &[2, 5, 3], dtype).transpose(1, 2).unwrap();
        let cpu = concat(&[&a, &e, &b, &t], 1).unwrap();
        assert_eq!(cpu.shape(), [2, 10, 5]);
        let cpu_last = concat(&[&a, &a], -1).unwrap();
        let cpu_stack = stack(&[&a, &a, &a], 3).unwrap();
        for p in gpus() {
            let (ag, bg, eg) = (a.to(p).unwrap(), b.to(p).unwrap(), e.to(p).unwrap());
            let tg = tensor(&values(2 * 5 * 3, 3, false), &[2, 5, 3], dtype)
                .to(p)
                .unwrap()
                .transpose(1, 2)
                .unwrap();
            same(&format!("concat {dtype}"), &cpu, &concat(&[&ag, &eg, &bg, &tg], 1).unwrap());
            same(&format!("concat last {dtype}"), &cpu_last, &concat(&[&ag, &ag], -1).unwrap());
            same(&format!("stack {dtype}"), &cpu_stack, &stack(&[&ag, &ag, &ag], 3).unwrap());
            let parts = split(&bg, &[1, 0, 3], 1).unwrap();
            assert_eq!(parts[2].shape(), [2, 3, 5]);
            same("split", &split(&b, &[1, 0, 3], 1).unwrap()[2], &parts[2].contiguous().unwrap());
        }
    }
    // mixed dtypes promote alike everywhere
    let a = iota(&[3], DType::U8);
    let b = iota(&[2], DType::F16);
    let cpu = concat(&[&a, &b], 0).unwrap();
    assert_eq!(cpu.dtype(), DType::F16);
    for p in gpus() {
        same("mixed", &cpu, &concat(&[&a.to(p).unwrap(), &b.to(p).unwrap()], 0).unwrap());
    }
    // DenseNet-style: 20 parts of varying widths (more than one dispatch binds, so the join
    // runs in column windows), one of them a view at an offset, one empty.
    let parts: Vec<Tensor> = (0..20)
        .map(|i| {
            let c = [1, 3, 0, 7, 2][i % 5];
            tensor(&values(2 * c * 9, 100 + i as u64, false), &[2, c, 3, 3], DType::F32)
        })
        .collect();
    let big = tensor(&values(2 * 6 * 9, 7, false), &[2, 6, 3, 3], DType::F32);
    let mut cpu_refs: Vec<&Tensor> = parts.iter().collect();
    let window = big.slice(0, Some(1), Some(2), 1).unwrap();
    let window = window.expand(&[2, 6, 3, 3]).unwrap();
    cpu_refs.insert(5, &window);
    let cpu = concat(&cpu_refs, 1).unwrap();
    for p in gpus() {
        let gparts: Vec<Tensor> = parts.iter().map(|t| t.to(p).unwrap()).collect();
        let gwin = big.to(p).unwrap().slice(0, Some(1), Some(2), 1).unwrap();
        let gwin = gwin.expand(&[2, 6, 3, 3]).unwrap();
        let mut refs: Vec<&Tensor> = gparts.iter().collect();
        refs.insert(5, &gwin);
        same("concat of 21 parts", &cpu, &concat(&refs, 1).unwrap());
        // a contiguous part that starts past its buffer's first element
        let off = big.to(p).unwrap().slice(0, Some(1), Some(2), 1).unwrap();
        same(
            "concat of offset views",
            &concat(
                &[
                    &big.slice(0, Some(1), Some(2), 1).unwrap(),
                    &parts[1].slice(0, Some(0), Some(1), 1).unwrap(),
                ],
                1,
            )
            .unwrap(),
            &concat(&[&off, &gparts[1].slice(0, Some(0), Some(1), 1).unwrap()], 1).unwrap(),
        );
    }
    // all parts empty
    let z = tensor(&[], &[0, 3], DType::F32);
    assert_eq!(concat(&[&z, &z], 0).unwrap().shape(), [0, 3]);
}

#[test]
fn gather_index_select_match_cpu() {
    let idx32 = Tensor::from_slice(&[2i32, -1, 0, 1, -3, 2], &[2, 3], Place::Cpu).unwrap();
    let idx64 = idx32.astype(DType::I64).unwrap();
    for dtype in [DType::F32, DType::F16, DType::I32, DType::U8] {
        let x = tensor(&values(3 * 4 * 5, 9, true), &[4, 3, 5], dtype).transpose(0, 1).unwrap();
        for axis in [0isize, -2, 2] {
            let cpu = gather(&x, &idx64, axis).unwrap();
            let mut want = x.shape().to_vec();
            let ax = if axis < 0 { (axis + 3) as usize } else { axis as usize };
            want.splice(ax..ax + 1, [2, 3]);
            assert_eq!(cpu.shape(), want.as_slice());
            for p in gpus() {
                let xg = x.to(p).unwrap();
                same(
                    &format!("gather {dtype} ax {axis}"),
                    &cpu,
                    &gather(&xg, &idx64, axis).unwrap(),
                );
                let ig = idx32.to(p).unwrap();
                same(&format!("gather i32 {dtype}"), &cpu, &gather(&xg, &ig, axis).unwrap());
            }
        }
        let i1 = Tensor::from_slice(&[1i32, 1, 0], &[3], Place::Cpu).unwrap();
        let cpu = index_select(&x, 0, &i1).unwrap();
        assert_eq!(cpu.shape(), [3, 4, 5]);
        let empty = Tensor::from_slice::<i32>(&[], &[0], Place::Cpu).unwrap();
        assert_eq!(index_select(&x, 1, &empty).unwrap().shape(), [3, 0, 5]);
        for p in gpus() {
            let xg = x.to(p).unwrap();
            same("index_select", &cpu, &index_select(&xg, 0, &i1.to(p).unwrap()).unwrap());
            assert_eq!(index_select(&xg, 1, &empty).unwrap().shape(), [3, 0, 5]);
        }
    }
}

/// f16 slices of even length gather as packed u32 words on GPUs (no f32 copy of the table):
/// embedding-style rows, an inner axis, a view at an even and at an odd element offset (the
/// latter takes the widening path).
#[test]
fn gather_f16_rows_as_words_match_cpu() {
    let idx = Tensor::from_slice(&[5i64, 0, -1, 2, 2], &[5], Place::Cpu).unwrap();
    let n = 7 * 6 * 8;
    let table = tensor(&values(n + 1, 21, true), &[n + 1], DType::F16);
    // The views are taken on each place, so the GPU ones keep their element offsets.
    let views = |t: &Tensor| -> Vec<(&'static str, Tensor)> {
        let even = t.slice(0, Some(0), Some(n as isize), 1).unwrap().reshape(&[7, 6, 8]).unwrap();
        let odd = t.slice(0, Some(1), None, 1).unwrap().reshape(&[7, 6, 8]).unwrap();
        let rows = even.slice(0, Some(1), None, 1).unwrap();
        vec![("even", even), ("odd", odd), ("rows from 1", rows)]
    };
    let cpu_views = views(&table);
    for p in gpus() {
        let gpu_table = table.to(p).unwrap();
        for ((name, x), (_, xg)) in cpu_views.iter().zip(views(&gpu_table)) {
            assert!(xg.is_contiguous());
            for axis in [0isize, 1] {
                let idx = if axis == 1 {
                    idx.slice(0, Some(0), Some(4), 1).unwrap()
                } else {
                    idx.clone()
                };
                let cpu = gather(x, &idx, axis).unwrap();
                let got = gather(&xg, &idx, axis).unwrap();
                same(&format!("f16 gather {name} axis {axis}"), &cpu, &got);
            }
        }
    }
}

#[test]
fn pad_and_tile_match_cpu() {
    let pads: &[&[(isize, isize)]] = &[&[(1, 2), (0, 3)], &[(-1, 1), (2, -2)], &[(0, 0), (3, 0)]];
    for dtype in [DType::F32, DType::F16, DType::I32, DType::Bool] {
        let x = tensor(&values(4 * 5, 4, false), &[5, 4], dtype).transpose(0, 1).unwrap();
        for &pd in pads {
            for mode in [PadMode::Constant(1.0), PadMode::Reflect, PadMode::Edge] {
                let cpu = pad(&x, pd, mode).unwrap();
                for p in gpus() {
                    let got = pad(&x.to(p).unwrap(), pd, mode).unwrap();
                    same(&format!("pad {dtype} {pd:?} {mode:?}"), &cpu, &got);
                }
            }
        }
        for reps in [&[2usize, 3][..], &[3], &[2, 1, 2], &[0, 2]] {
            let cpu = tile(&x, reps).unwrap();
            for p in gpus() {
                same(
                    &format!("tile {dtype} {reps:?}"),
                    &cpu,
                    &tile(&x.to(p).unwrap(), reps).unwrap(),
                );
            }
        }
    }
}

#[test]
fn shape_errors() {
    for p in devices() {
        let a = iota(&[2, 3], DType::F32).to(p).unwrap();
        let b = iota(&[3, 3], DType::F32).to(p).unwrap();
        let e = concat(&[&a, &b], 1).unwrap_err().to_string();
        assert!(e.contains("concat") && e.contains("[2, 3]") && e.contains("[3, 3]"), "{e}");
        assert!(concat(&[], 0).is_err());
        assert!(concat(&[&a], 2).is_err());
        assert!(stack(&[&a, &b], 0).is_err());
        assert!(stack(&[&a], 4).is_err());
        assert!(split(&a, &[1, 1], 1).is_err());
        assert!(split_into(&a, 0, 1).is_err());
        let idx = Tensor::from_slice(&[3i64], &[1], Place::Cpu).unwrap();
        let e = gather(&a, &idx, 1).unwrap_err().to_string();
        assert!(e.contains("gather") && e.contains("out of bounds") && e.contains("size 3"), "{e}");
        let idx = Tensor::from_slice(&[-4i32], &[1], Place::Cpu).unwrap();
        assert!(gather(&a, &idx, 1).is_err());
        let fidx = Tensor::from_slice(&[0f32], &[1], Place::Cpu).unwrap();
        assert!(gather(&a, &fidx, 1).is_err());
        let two_d = Tensor::from_slice(&[0i32, 1], &[1, 2], Place::Cpu).unwrap();
        assert!(index_select(&a, 0, &two_d).is_err());
        let e = pad(&a, &[(0, 0), (3, 0)], PadMode::Reflect).unwrap_err().to_string();
        assert!(e.contains("pad") && e.contains("reflect"), "{e}");
        assert!(pad(&a, &[(0, 0)], PadMode::Edge).is_err());
        assert!(pad(&a, &[(-2, -1), (0, 0)], PadMode::Edge).is_err());
    }
}

/// A concat large enough to be copied on the worker pool (runs split into pieces), with a
/// permuted part (element-strided copy) and batch 2 (one run per part and image), against the
/// interleaving written out here.
#[test]
fn large_cpu_concat_matches_hand_interleaving() {
    let (n, hw) = (2, 40 * 40);
    let a = tensor(&values(n * 64 * hw, 11, false), &[n, 64, 40, 40], DType::F32);
    let b = tensor(&values(n * 40 * 40 * 32, 12, false), &[n, 40, 40, 32], DType::F32)
        .permute(&[0, 3, 1, 2])
        .unwrap();
    let c = tensor(&values(n * 3 * hw, 13, false), &[n, 3, 40, 40], DType::F32);
    let got = concat(&[&a, &b, &c], 1).unwrap();
    assert_eq!(got.shape(), [n, 99, 40, 40]);
    let (av, bv, cv) = (f(&a), f(&b.contiguous().unwrap()), f(&c));
    let mut want = Vec::with_capacity(n * 99 * hw);
    for img in 0..n {
        want.extend_from_slice(&av[img * 64 * hw..(img + 1) * 64 * hw]);
        want.extend_from_slice(&bv[img * 32 * hw..(img + 1) * 32 * hw]);
        want.extend_from_slice(&cv[img * 3 * hw..(img + 1) * 3 * hw]);
    }
    assert_eq!(f(&got), want);
}

/// f32 rows of a multiple of 4 at a 4-aligned offset gather as vec4s on GPUs (`gather4`); an
/// offset of 2 takes the word kernel. Embedding-style tables, values against the CPU.
#[test]
fn gather_vec4_rows_match_cpu() {
    let idx = Tensor::from_slice(&[9i64, 0, -1, 3, 3, 7], &[2, 3], Place::Cpu).unwrap();
    let table = tensor(&values(10 * 12 + 4, 5, true), &[10 * 12 + 4], DType::F32);
    let views = |t: &Tensor| -> Vec<(usize, Tensor)> {
        [0usize, 4, 2]
            .into_iter()
            .map(|o| {
                let v = t.slice(0, Some(o as isize), Some((o + 120) as isize), 1).unwrap();
                (o, v.reshape(&[10, 12]).unwrap())
            })
            .collect()
    };
    let cpu_views = views(&table);
    for p in gpus() {
        let gpu_table = table.to(p).unwrap();
        for ((o, x), (_, xg)) in cpu_views.iter().zip(views(&gpu_table)) {
            let cpu = gather(x, &idx, 0).unwrap();
            assert_eq!(cpu.shape(), [2, 3, 12]);
            same(&format!("f32 gather at offset {o}"), &cpu, &gather(&xg, &idx, 0).unwrap());
        }
    }
}
