//! The CPU backend's fast f32 SGEMM path (matmul, gemm, conv2d) against its f64 reference loops:
//! the same op on f64 copies of the operands takes the reference path, so each case checks the
//! packed GEMM, the stride handling and the im2col lowering against an independent definition.

mod common;
use common::*;
use mpsrt_tensor::{
    add, conv2d, conv2d_fused, gemm, matmul, Activation, Conv2dOptions, ConvPadding, DType, Tensor,
};

fn rnd(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    tensor(&values(n, seed, false), shape, DType::F32)
}

fn f64_of(t: &Tensor) -> Tensor {
    t.astype(DType::F64).unwrap()
}

fn check(what: &str, fast: &Tensor, reference: &Tensor) {
    check_tol(what, fast, reference, 1e-4);
}

/// [`check`] with tolerance `tol` (f32 rounding grows with the reduction length).
fn check_tol(what: &str, fast: &Tensor, reference: &Tensor, tol: f64) {
    assert_eq!(fast.dtype(), DType::F32, "{what}: the fast path keeps f32");
    assert_eq!(fast.shape(), reference.shape(), "{what}: shape");
    let got = fast.to_f64_vec().unwrap();
    assert_close(what, &got, &reference.to_f64_vec().unwrap(), tol, tol);
}

/// (n, c, h, w, oc, k, stride, padding [t, l, b, r], dilation, groups, bias)
type ConvCase = (
    usize,
    usize,
    usize,
    usize,
    usize,
    [usize; 2],
    [usize; 2],
    [usize; 4],
    [usize; 2],
    usize,
    bool,
);

const CONV: &[ConvCase] = &[
    (1, 3, 7, 9, 5, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true),
    (2, 4, 9, 8, 6, [3, 2], [2, 1], [0, 2, 1, 0], [1, 1], 2, false),
    (1, 3, 12, 13, 4, [3, 3], [1, 1], [2, 2, 2, 2], [2, 2], 1, true),
    (2, 6, 9, 9, 6, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 6, true), // depthwise
    (1, 33, 5, 5, 70, [1, 1], [1, 1], [0; 4], [1, 1], 1, true),     // 1×1: no im2col
    (3, 17, 9, 9, 65, [1, 1], [2, 2], [0; 4], [1, 1], 1, false),    // 1×1 stride 2: im2col
    (2, 8, 6, 5, 4, [1, 1], [1, 1], [0; 4], [1, 1], 2, true),       // grouped 1×1
    (1, 3, 23, 21, 8, [7, 7], [2, 2], [3, 3, 3, 3], [1, 1], 1, true), // a ResNet stem
    (1, 1, 1, 1, 1, [1, 1], [1, 1], [0; 4], [1, 1], 1, false),
    (0, 3, 5, 5, 2, [3, 3], [1, 1], [0; 4], [1, 1], 1, true), // empty batch
    (1, 64, 17, 19, 129, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true), // past the SGEMM blocks
    // threaded im2col (≥ 64K column elements), strided + dilated + asymmetric padding
    (1, 48, 30, 31, 8, [3, 3], [2, 2], [1, 2, 1, 0], [2, 2], 1, true),
    // im2col in column blocks (> 256K column elements): blocks end mid output row
    (1, 33, 40, 37, 17, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true),
    (2, 33, 61, 59, 3, [3, 3], [2, 2], [1, 0, 2, 1], [1, 1], 1, false), // strided, batched
    (1, 34, 50, 45, 6, [3, 3], [1, 1], [2, 2, 2, 2], [2, 2], 2, true),  // dilated, grouped
    (1, 64, 56, 56, 32, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true), // a DenseNet 3×3
    // stride 1, output as wide as the input: im2col rows are shifted copies of the plane
    (1, 5, 8, 11, 7, [3, 2], [1, 1], [1, 1, 1, 0], [1, 1], 1, true), // asymmetric kernel
    (1, 4, 6, 7, 3, [3, 3], [1, 1], [2, 1, 0, 1], [1, 1], 1, false), // more padding on top
    (2, 2, 1, 5, 2, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true),  // rows outside the image
    (1, 128, 14, 14, 32, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, true), // threaded, one block
];

#[test]
fn conv2d_fast_path_matches_the_f64_reference() {
    for (i, &(n, c, h, w, oc, k, stride, pad, dilation, groups, bias)) in CONV.iter().enumerate() {
        let x = rnd(&[n, c, h, w], 10 + i as u64);
        let wt = rnd(&[oc, c / groups, k[0], k[1]], 100 + i as u64);
        let b = rnd(&[oc], 1000 + i as u64);
        let o = Conv2dOptions { stride, padding: ConvPadding::Explicit(pad), dilation, groups };
        let fast = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
        let (bf, xf, wf) = (f64_of(&b), f64_of(&x), f64_of(&wt));
        let reference = conv2d(&xf, &wf, bias.then_some(&bf), &o).unwrap();
        // f32 accumulation over K = c/groups·kh·kw terms: allow for K past 256
        let tol = 1e-4 * (c / groups.max(1) * k[0] * k[1]).div_ceil(256) as f64;
        check_tol(&format!("conv2d case {i}"), &fast, &reference, tol);
    }
    // a non-contiguous (permuted) input goes through the same path
    let x = rnd(&[2, 9, 8, 3], 7).permute(&[0, 3, 1, 2]).unwrap();
    let wt = rnd(&[4, 3, 3, 3], 8);
    let o = Conv2dOptions { padding: ConvPadding::symmetric(1, 1), ..Default::default() };
    let reference = conv2d(&f64_of(&x), &f64_of(&wt), None, &o).unwrap();
    check("conv2d permuted input", &conv2d(&x, &wt, None, &o).unwrap(), &reference);
}

/// The residual add and activation applied per block as the fast path stores it, against the
/// f64 reference run as separate ops, on the lowered, blocked, direct 1×1 and batched paths.
#[test]
fn conv2d_fused_epilogue_matches_the_f64_reference() {
    let acts = [Activation::Relu, Activation::LeakyRelu(0.1), Activation::Clip(-1.0, 2.0)];
    for (i, &(n, c, h, w, oc, k, stride, pad, dilation, groups, bias)) in CONV.iter().enumerate() {
        let act = acts[i % acts.len()];
        let x = rnd(&[n, c, h, w], 30 + i as u64);
        let wt = rnd(&[oc, c / groups, k[0], k[1]], 300 + i as u64);
        let b = rnd(&[oc], 3000 + i as u64);
        let o = Conv2dOptions { stride, padding: ConvPadding::Explicit(pad), dilation, groups };
        let plain = conv2d(&f64_of(&x), &f64_of(&wt), bias.then_some(&f64_of(&b)), &o).unwrap();
        let r = rnd(plain.shape(), 4000 + i as u64);
        let reference = act.apply(&add(&plain, &f64_of(&r)).unwrap()).unwrap();
        let fast = conv2d_fused(&x, &wt, bias.then_some(&b), &o, Some(&r), Some(act)).unwrap();
        let tol = 1e-4 * (c / groups * k[0] * k[1]).div_ceil(256) as f64;
        check_tol(&format!("conv2d_fused case {i} {act:?}"), &fast, &reference, tol);
    }
}

#[test]
fn matmul_fast_path_matches_the_f64_reference() {
    // (a shape, b shape, transpose a's last two dims, transpose b's)
    let cases: &[(&[usize], &[usize], bool, bool)] = &[
        (&[3, 5], &[5, 4], false, false),
        (&[17], &[17, 33], false, false),           // 1-D lhs
        (&[2, 3, 37, 45], &[45, 51], false, false), // broadcast batch
        (&[4, 1, 9, 8], &[3, 8, 7], false, false),  // both batch dims broadcast
        (&[2, 31, 20], &[2, 29, 31], true, true),   // transposed views, no copies
        (&[130, 257], &[257, 65], false, false),    // past the SGEMM blocks
        (&[0, 5], &[5, 3], false, false),           // zero rows
        (&[4, 0], &[0, 3], false, false),           // K = 0: zeros
    ];
    for (i, &(sa, sb, ta, tb)) in cases.iter().enumerate() {
        let mut a = rnd(sa, 20 + i as u64);
        let mut b = rnd(sb, 40 + i as u64);
        if ta {
            a = a.transpose(-1, -2).unwrap();
        }
        if tb {
            b = b.transpose(-1, -2).unwrap();
        }
        let fast = matmul(&a, &b).unwrap();
        let reference = matmul(&f64_of(&a), &f64_of(&b)).unwrap();
        check(&format!("matmul case {i} {sa:?}x{sb:?}"), &fast, &reference);
    }
    // stride-0 (expanded), negative-stride (reversed) and step-2 operands
    let views: [(Tensor, Tensor); 3] = [
        (rnd(&[1, 17], 1).expand(&[33, 17]).unwrap(), rnd(&[17, 1], 2).expand(&[17, 3]).unwrap()),
        (
            rnd(&[9, 20], 3).slice(1, None, None, -1).unwrap(),
            rnd(&[40, 3], 4).slice(0, None, None, 2).unwrap(),
        ),
        (
            rnd(&[65, 70], 5).slice(0, None, None, -1).unwrap().transpose(0, 1).unwrap(),
            rnd(&[65, 1], 6).slice(0, None, None, -1).unwrap(),
        ),
    ];
    for (i, (a, b)) in views.iter().enumerate() {
        let reference = matmul(&f64_of(a), &f64_of(b)).unwrap();
        check(&format!("matmul strided view {i}"), &matmul(a, b).unwrap(), &reference);
    }
}

/// (M, N, K, transA, transB, C shape or none, alpha, beta)
type GemmCase = (usize, usize, usize, bool, bool, Option<&'static [usize]>, f64, f64);

#[test]
fn gemm_fast_path_matches_the_f64_reference() {
    let cases: &[GemmCase] = &[
        (7, 9, 11, false, false, Some(&[9]), 1.0, 1.0),
        (7, 9, 11, true, true, Some(&[7, 1]), 0.5, -2.0),
        (16, 3, 40, false, true, Some(&[16, 3]), 1.0, 0.25),
        (5, 5, 5, true, false, None, 2.0, 0.0),
        (1, 1, 1, false, false, Some(&[]), 1.0, 1.0), // scalar C
    ];
    for (i, &(m, n, k, ta, tb, cshape, alpha, beta)) in cases.iter().enumerate() {
        let a = rnd(&if ta { [k, m] } else { [m, k] }, 60 + i as u64);
        let b = rnd(&if tb { [n, k] } else { [k, n] }, 80 + i as u64);
        let c = cshape.map(|s| rnd(s, 90 + i as u64));
        let fast = gemm(&a, &b, c.as_ref(), alpha, beta, ta, tb).unwrap();
        let cf = c.as_ref().map(f64_of);
        let reference = gemm(&f64_of(&a), &f64_of(&b), cf.as_ref(), alpha, beta, ta, tb).unwrap();
        check(&format!("gemm case {i}"), &fast, &reference);
    }
}

/// The f32 elementwise evaluator's `f(x * s + t)` path (per-channel constants read run by run)
/// and its fallbacks, against the same expression on f64 copies (the general column path).
#[test]
fn affine_elementwise_fast_path_matches_the_f64_reference() {
    use mpsrt_tensor::{fused_elementwise, BinaryFn, Expr, Scalar, UnaryFn};
    let (x, k0, k1, two) = (
        Expr::input(0),
        Expr::input(1),
        Expr::input(2),
        Expr::Scalar(0, mpsrt_tensor::VType::Float),
    );
    let mul = |a: &Expr, b: &Expr| Expr::binary(BinaryFn::Mul, a.clone(), b.clone());
    let addx = |a: Expr, b: &Expr| Expr::binary(BinaryFn::Add, a, b.clone());
    let relu = |e: Expr| Expr::unary(UnaryFn::Relu, e);
    // (what, x shape, constant shapes, expression)
    type Case = (&'static str, Vec<usize>, Vec<Vec<usize>>, Expr);
    let cases: Vec<Case> = vec![
        (
            "relu(x*s+t), 63-element planes",
            vec![2, 5, 7, 9],
            vec![vec![5, 1, 1], vec![5, 1, 1]],
            relu(addx(mul(&x, &k0), &k1)),
        ),
        (
            "t + s*x, commuted",
            vec![1, 3, 4, 50],
            vec![vec![3, 1, 1], vec![1, 3, 1, 1]],
            addx(mul(&k0, &x), &k1),
        ),
        (
            "sigmoid(x*s), 3-element runs",
            vec![2, 6, 3],
            vec![vec![6, 1]],
            Expr::unary(UnaryFn::Sigmoid, mul(&x, &k0)),
        ),
        (
            "relu(x*2+t), scalar scale",
            vec![1, 4, 5, 5],
            vec![vec![4, 1, 1]],
            relu(addx(mul(&x, &two), &k0)),
        ),
        (
            "chunks start mid-plane",
            vec![1, 3, 100, 97],
            vec![vec![3, 1, 1], vec![3, 1, 1]],
            relu(addx(mul(&x, &k0), &k1)),
        ),
        (
            "spatial scale: general path",
            vec![2, 3, 4, 5],
            vec![vec![4, 5], vec![3, 1, 1]],
            addx(mul(&x, &k0), &k1),
        ),
        (
            "row bias: general path",
            vec![6, 40],
            vec![vec![40], vec![6, 1]],
            Expr::unary(UnaryFn::Tanh, addx(mul(&x, &k0), &k1)),
        ),
    ];
    // `x * s` keeps the sign of a zero product (no `+ 0.0` sneaks in): bit-exact against the
    // general path's Mul node.
    let x0 = mpsrt_tensor::Tensor::from_slice(
        &[-0.0f32, 0.0, -1.5, 2.0],
        &[1, 2, 2, 1],
        mpsrt_tensor::Place::Cpu,
    )
    .unwrap();
    let s0 =
        mpsrt_tensor::Tensor::from_slice(&[1.0f32, -1.0], &[2, 1, 1], mpsrt_tensor::Place::Cpu)
            .unwrap();
    let y0 = fused_elementwise("affine", &[&x0, &s0], DType::F32, mul(&x, &k0), &[]).unwrap();
    let bits: Vec<u32> = y0.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
    let want: Vec<u32> = [-0.0f32, 0.0, 1.5, -2.0].iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits, want, "x * s keeps signed zeros");
    for (i, (what, xs, ks, e)) in cases.into_iter().enumerate() {
        let mut inputs = vec![rnd(&xs, 50 + i as u64)];
        inputs.extend(ks.iter().enumerate().map(|(j, s)| rnd(s, 60 + (i * 4 + j) as u64)));
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let f64s: Vec<Tensor> = inputs.iter().map(f64_of).collect();
        let f64_refs: Vec<&Tensor> = f64s.iter().collect();
        let s = [Scalar::F(2.0)];
        let fast = fused_elementwise("affine", &refs, DType::F32, e.clone(), &s).unwrap();
        let want = fused_elementwise("affine", &f64_refs, DType::F64, e, &s).unwrap();
        check_tol(what, &fast, &want, 1e-6);
        // A permuted (non-contiguous) x takes the general path and must agree too.
        if xs.len() == 4 && ks.len() == 2 && ks.iter().all(|k| k.ends_with(&[1, 1])) {
            let xp = inputs[0].permute(&[0, 1, 3, 2]).unwrap();
            let mut p = refs.clone();
            p[0] = &xp;
            let xp64 = f64_of(&xp);
            let mut p64 = f64_refs.clone();
            p64[0] = &xp64;
            let e = relu(addx(mul(&x, &k0), &k1));
            let fast = fused_elementwise("affine", &p, DType::F32, e.clone(), &s).unwrap();
            let want = fused_elementwise("affine", &p64, DType::F64, e, &s).unwrap();
            check_tol(&format!("{what}, permuted x"), &fast, &want, 1e-6);
        }
    }
}
