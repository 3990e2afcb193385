//! The CPU reference against hand-derived values (the independent oracle for Rust tests; the
//! Python suite also compares against NumPy). Each row: op, input, expected.

use mpsrt_tensor::{self as mt, DType, Place, Tensor};

fn t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v, &[v.len()], Place::Cpu).unwrap()
}

fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-6 * w.abs().max(1.0)
        })
}

#[test]
fn unary_edges_follow_numpy() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    type Un = fn(&Tensor) -> mt::Result<Tensor>;
    let rows: &[(&str, Un, &[f32], &[f64])] = &[
        ("log", mt::log, &[-1.0, 0.0, 1.0, f32::INFINITY], &[nan, -inf, 0.0, inf]),
        ("sqrt", mt::sqrt, &[-4.0, 0.0, 9.0], &[nan, 0.0, 3.0]),
        ("exp", mt::exp, &[0.0, f32::NEG_INFINITY, 1.0], &[1.0, 0.0, std::f64::consts::E]),
        ("relu", mt::relu, &[-2.0, 0.0, 3.0, f32::NAN], &[0.0, 0.0, 3.0, nan]),
        ("sigmoid", mt::sigmoid, &[0.0, -1000.0, 1000.0], &[0.5, 0.0, 1.0]),
        (
            "tanh",
            mt::tanh,
            &[0.0, 100.0, -100.0, 0.01],
            &[0.0, 1.0, -1.0, 0.009_999_666_686_665_238],
        ),
        ("abs", mt::abs, &[-0.5, 2.0], &[0.5, 2.0]),
        ("round", mt::round, &[0.5, 1.5, 2.5, -0.5], &[0.0, 2.0, 2.0, -0.0]),
        ("sign", mt::sign, &[-3.0, 0.0, 2.0, f32::NAN], &[-1.0, 0.0, 1.0, nan]),
        (
            "erf",
            mt::erf,
            &[0.0, 1.0, -2.0],
            &[0.0, 0.842_700_792_949_714_9, -0.995_322_265_018_952_7],
        ),
    ];
    for &(name, f, x, want) in rows {
        let got = f(&t(x)).unwrap().to_f64_vec().unwrap();
        assert!(same(&got, want), "{name}({x:?}) = {got:?}, want {want:?}");
    }
}

#[test]
fn binary_edges_follow_numpy() {
    let nan = f64::NAN;
    type Bin = fn(&Tensor, &Tensor) -> mt::Result<Tensor>;
    type Row<'a> = (&'a str, Bin, &'a [f32], &'a [f32], &'a [f64]);
    let rows: &[Row] = &[
        (
            "pow",
            mt::pow,
            &[-8.0, -2.0, 0.0, 2.0, f32::NAN, 1.0],
            &[1.0 / 3.0, 3.0, 0.0, -1.0, 0.0, f32::NAN],
            &[nan, -8.0, 1.0, 0.5, 1.0, 1.0],
        ),
        ("maximum", mt::maximum, &[1.0, f32::NAN, -1.0], &[2.0, 0.0, f32::NAN], &[2.0, nan, nan]),
        ("minimum", mt::minimum, &[1.0, 3.0], &[2.0, -3.0], &[1.0, -3.0]),
        (
            "divide",
            mt::divide,
            &[1.0, -1.0, 0.0],
            &[0.0, 0.0, 0.0],
            &[f64::INFINITY, f64::NEG_INFINITY, nan],
        ),
    ];
    for &(name, f, a, b, want) in rows {
        let got = f(&t(a), &t(b)).unwrap().to_f64_vec().unwrap();
        assert!(same(&got, want), "{name}({a:?}, {b:?}) = {got:?}, want {want:?}");
    }
    let i = Tensor::from_slice(&[7i32, -7, 2, 2147483647], &[4], Place::Cpu).unwrap();
    let j = Tensor::from_slice(&[2i32, 2, 10, 1], &[4], Place::Cpu).unwrap();
    assert_eq!(
        mt::divide(&i, &j).unwrap().to_f64_vec().unwrap(),
        vec![3.5, -3.5, 0.2f32 as f64, 2147483647.0f32 as f64]
    );
    assert_eq!(
        mt::add(&i, &j).unwrap().to_vec::<i32>().unwrap(),
        vec![9, -5, 12, i32::MIN],
        "int add wraps"
    );
    assert_eq!(mt::pow(&i, &j).unwrap().to_vec::<i32>().unwrap()[..3], [49, 49, 1024]);
    let u = Tensor::from_slice(&[250u8, 3], &[2], Place::Cpu).unwrap();
    assert_eq!(
        mt::add(&u, &u).unwrap().to_vec::<u8>().unwrap(),
        vec![244, 6],
        "uint8 wraps like NumPy"
    );
    assert_eq!(
        mt::equal(&t(&[f32::NAN, 1.0]), &t(&[f32::NAN, 1.0])).unwrap().to_f64_vec().unwrap(),
        vec![0.0, 1.0]
    );
}

#[test]
fn creation_and_views() {
    let a = mt::arange(0.0, 6.0, 1.0, DType::F32, Place::Cpu).unwrap().reshape(&[2, 3]).unwrap();
    assert_eq!(
        a.transpose(0, 1).unwrap().contiguous().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    assert_eq!(
        a.slice(1, None, None, -1).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 1.0, 0.0, 5.0, 4.0, 3.0]
    );
    assert_eq!(
        mt::arange(5.0, 0.0, -2.0, DType::I32, Place::Cpu).unwrap().to_vec::<i32>().unwrap(),
        vec![5, 3, 1]
    );
    assert_eq!(
        mt::full(&[2], 7i64, DType::I32, Place::Cpu).unwrap().to_vec::<i32>().unwrap(),
        vec![7, 7]
    );
    assert_eq!(a.flatten(0, -1).unwrap().shape(), &[6]);
    assert_eq!(a.unsqueeze(-1).unwrap().shape(), &[2, 3, 1]);
    assert_eq!(a.unsqueeze(0).unwrap().squeeze(None).unwrap().shape(), &[2, 3]);
    mt::manual_seed(7);
    let r1 = mt::randn(&[5], DType::F32, Place::Cpu).unwrap().to_vec::<f32>().unwrap();
    mt::manual_seed(7);
    let r2 = mt::randn(&[5], DType::F32, Place::Cpu).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(r1, r2, "seeded randn is reproducible");
    let u = mt::rand(&[1000], DType::F32, Place::Cpu).unwrap().to_vec::<f32>().unwrap();
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean = u.iter().sum::<f32>() / 1000.0;
    assert!((mean - 0.5).abs() < 0.05, "uniform mean {mean}");
}
