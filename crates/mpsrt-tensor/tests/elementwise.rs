//! Every elementwise op on every device against the CPU reference: random inputs salted with
//! edge values (0, ±0, ±inf, NaN), every broadcasting pattern, odd sizes, several dtypes.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};

type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
type Un = fn(&Tensor) -> Result<Tensor>;

const BINARY: &[(&str, Bin)] = &[
    ("add", mt::add),
    ("subtract", mt::subtract),
    ("multiply", mt::multiply),
    ("divide", mt::divide),
    ("pow", mt::pow),
    ("maximum", mt::maximum),
    ("minimum", mt::minimum),
    ("equal", mt::equal),
    ("not_equal", mt::not_equal),
    ("less", mt::less),
    ("less_equal", mt::less_equal),
    ("greater", mt::greater),
    ("greater_equal", mt::greater_equal),
];

/// Broadcasting patterns: same shape, outer product, trailing vector, leading 1s, scalar,
/// zero-size, size-1 both, three-way.
const SHAPES: &[(&[usize], &[usize])] = &[
    (&[17], &[17]),
    (&[3, 1], &[1, 4]),
    (&[2, 3, 5], &[5]),
    (&[1], &[1023]),
    (&[], &[3]),
    (&[0, 3], &[3]),
    (&[4, 1, 3], &[2, 1]),
    (&[1], &[1]),
    (&[1024], &[1024]),
    // Vec4 mode with every unrolled step in use (n/4 > threads launched).
    (&[40_000], &[40_000]),
];

fn check_on_gpus(what: &str, cpu: &Tensor, gpu_result: impl Fn(Place) -> Result<Tensor>) {
    let want = cpu.to_f64_vec().unwrap();
    let (rtol, atol) = tol(cpu.dtype());
    for p in gpus() {
        let got = gpu_result(p).unwrap_or_else(|e| panic!("{what} on {p}: {e}"));
        assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
        assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
        assert_eq!(got.place(), p, "{what}: place");
        assert_close(&format!("{what} on {p}"), &got.to_f64_vec().unwrap(), &want, rtol, atol);
    }
}

#[test]
fn binary_ops_match_cpu_reference() {
    let mut seed = 1;
    for &(name, f) in BINARY {
        for &(sa, sb) in SHAPES {
            for dtype in [DType::F32, DType::F16, DType::I32, DType::U8] {
                seed += 1;
                let na: usize = sa.iter().product();
                let nb: usize = sb.iter().product();
                let a = tensor(&values(na, seed, true), sa, dtype);
                let b = tensor(&values(nb, seed * 31, true), sb, dtype);
                let cpu = f(&a, &b).unwrap();
                let what = format!("{name}({sa:?} {dtype}, {sb:?} {dtype})");
                check_on_gpus(&what, &cpu, |p| f(&a.to(p)?, &b.to(p)?));
            }
        }
    }
}

#[test]
fn mixed_dtypes_promote_alike_on_every_device() {
    let pairs = [
        (DType::F32, DType::I32, DType::F32),
        (DType::F16, DType::F32, DType::F32),
        (DType::I32, DType::F16, DType::F16),
        (DType::Bool, DType::F32, DType::F32),
        (DType::U8, DType::I8, DType::I32),
        (DType::Bool, DType::Bool, DType::Bool),
        (DType::U8, DType::U8, DType::U8),
    ];
    for (i, (da, db, want)) in pairs.into_iter().enumerate() {
        let a = tensor(&values(12, i as u64 + 100, false), &[3, 4], da);
        let b = tensor(&values(4, i as u64 + 200, false), &[4], db);
        let cpu = mt::add(&a, &b).unwrap();
        assert_eq!(cpu.dtype(), want, "{da} + {db}");
        check_on_gpus(&format!("add({da}, {db})"), &cpu, |p| mt::add(&a.to(p)?, &b.to(p)?));
    }
}

#[test]
fn scalar_operands_keep_tensor_dtype_within_category() {
    for place in devices() {
        let x = mt::arange(0.0, 6.0, 1.0, DType::I32, place).unwrap();
        assert_eq!(mt::add_scalar(&x, 2i64).unwrap().dtype(), DType::I32);
        assert_eq!(mt::multiply_scalar(&x, 0.5).unwrap().dtype(), DType::F32);
        let h = x.astype(DType::F16).unwrap();
        assert_eq!(mt::add_scalar(&h, 1.5).unwrap().dtype(), DType::F16);
        let r = mt::rsubtract_scalar(10i64, &x).unwrap();
        assert_eq!(r.to_f64_vec().unwrap(), vec![10.0, 9.0, 8.0, 7.0, 6.0, 5.0], "{place}");
        let d = mt::rdivide_scalar(1.0, &mt::add_scalar(&x, 1i64).unwrap()).unwrap();
        assert_close(
            "1/(x+1)",
            &d.to_f64_vec().unwrap(),
            &[1.0, 0.5, 1.0 / 3.0, 0.25, 0.2, 1.0 / 6.0],
            1e-6,
            0.0,
        );
    }
}

const UNARY: &[(&str, Un)] = &[
    ("abs", mt::abs),
    ("neg", mt::neg),
    ("exp", mt::exp),
    ("log", mt::log),
    ("sqrt", mt::sqrt),
    ("relu", mt::relu),
    ("sigmoid", mt::sigmoid),
    ("tanh", mt::tanh),
    ("erf", mt::erf),
    ("sin", mt::sin),
    ("cos", mt::cos),
    ("floor", mt::floor),
    ("ceil", mt::ceil),
    ("round", mt::round),
    ("reciprocal", mt::reciprocal),
    ("sign", mt::sign),
    ("silu", mt::silu),
    ("isnan", mt::isnan),
    ("gelu", |t| mt::gelu(t, false)),
    ("gelu_tanh", |t| mt::gelu(t, true)),
    ("leaky_relu", |t| mt::leaky_relu(t, 0.01)),
    ("elu", |t| mt::elu(t, 1.0)),
    ("hardsigmoid", |t| mt::hardsigmoid(t, 1.0 / 6.0, 0.5)),
    ("hardswish", mt::hardswish),
    ("softplus", |t| mt::softplus(t, 1.0, 20.0)),
    ("clip", |t| mt::clip(t, Some(-1.5), Some(2.0))),
];

#[test]
fn unary_ops_match_cpu_reference() {
    for (k, &(name, f)) in UNARY.iter().enumerate() {
        for (j, &n) in [1usize, 3, 17, 1023, 65537].iter().enumerate() {
            for dtype in [DType::F32, DType::F16, DType::I32] {
                // GPU sin/cos are accurate near [-pi, pi] only (Vulkan/Metal precision rules); int
                // edge values saturate to ±2^31, so trig on ints uses ordinary values.
                let edges = !(dtype == DType::I32 && matches!(name, "sin" | "cos"));
                let x = tensor(&values(n, (k * 10 + j) as u64, edges), &[n], dtype);
                let Ok(cpu) = f(&x) else { continue }; // e.g. ops that reject a dtype reject it everywhere
                check_on_gpus(&format!("{name}([{n}] {dtype})"), &cpu, |p| f(&x.to(p)?));
            }
        }
    }
}

#[test]
fn where_and_logic_match_cpu_reference() {
    let c = tensor(&values(12, 5, false), &[3, 4], DType::F32);
    let cond = mt::greater_scalar(&c, 0.0).unwrap();
    let a = tensor(&values(4, 6, true), &[4], DType::F32);
    let b = tensor(&values(3, 7, true), &[3, 1], DType::F16);
    let cpu = mt::where_(&cond, &a, &b).unwrap();
    assert_eq!(cpu.dtype(), DType::F32);
    check_on_gpus("where", &cpu, |p| mt::where_(&cond.to(p)?, &a.to(p)?, &b.to(p)?));
    let other = mt::less_scalar(&c, 1.0).unwrap();
    for (name, f) in [("and", mt::logical_and as Bin), ("or", mt::logical_or as Bin)] {
        let cpu = f(&cond, &other).unwrap();
        check_on_gpus(name, &cpu, |p| f(&cond.to(p)?, &other.to(p)?));
    }
    let cpu = mt::logical_not(&cond).unwrap();
    check_on_gpus("not", &cpu, |p| mt::logical_not(&cond.to(p)?));
}

#[test]
fn casts_between_all_gpu_dtypes() {
    let dts = [DType::Bool, DType::U8, DType::I8, DType::I32, DType::F16, DType::F32];
    for &from in &dts {
        let x = tensor(
            &values(37, 11, false).iter().map(|v| v * 40.0).collect::<Vec<_>>(),
            &[37],
            from,
        );
        for &to in &dts {
            let cpu = x.astype(to).unwrap();
            check_on_gpus(&format!("astype {from} -> {to}"), &cpu, |p| x.to(p)?.astype(to));
        }
    }
}

#[test]
fn non_contiguous_inputs() {
    let base = tensor(&values(60, 3, true), &[5, 12], DType::F32);
    let other = tensor(&values(60, 4, true), &[12, 5], DType::F32);
    type View = fn(&Tensor) -> Result<Tensor>;
    let views: &[(&str, View, View)] = &[
        ("transposed", |t| t.transpose(0, 1), |o| Ok(o.clone())),
        (
            "stepped",
            |t| t.slice(1, Some(1), None, 3),
            |o| o.slice(0, None, Some(4), 1)?.transpose(0, 1),
        ),
        ("reversed", |t| t.slice(0, None, None, -1), |o| o.transpose(0, 1)),
        ("expanded", |t| t.select(0, 2)?.unsqueeze(0)?.expand(&[5, 12]), |o| o.transpose(0, 1)),
        ("permuted3d", |t| t.reshape(&[5, 3, 4])?.permute(&[2, 0, 1]), |o| o.reshape(&[4, 5, 3])),
    ];
    for &(name, va, vb) in views {
        let a = va(&base).unwrap();
        let b = vb(&other).unwrap();
        let Ok(cpu) = mt::multiply(&a, &b) else {
            panic!("{name}: shapes {:?} {:?}", a.shape(), b.shape())
        };
        check_on_gpus(name, &cpu, |p| mt::multiply(&va(&base.to(p)?)?, &vb(&other.to(p)?)?));
        let cpu_c = a.contiguous().unwrap();
        check_on_gpus(&format!("{name} contiguous"), &cpu_c, |p| va(&base.to(p)?)?.contiguous());
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_op() {
    for p in devices() {
        let a = mt::zeros(&[2, 3], DType::F32, p).unwrap();
        let b = mt::zeros(&[4], DType::F32, p).unwrap();
        let e = mt::add(&a, &b).unwrap_err().to_string();
        assert!(e.starts_with("[add] shapes [2, 3] and [4] cannot be broadcast"), "{e}");
        let bo = mt::zeros(&[2], DType::Bool, p).unwrap();
        assert!(mt::subtract(&bo, &bo).unwrap_err().to_string().starts_with("[subtract]"));
        assert!(mt::exp(&bo).is_ok(), "exp of bool promotes to float");
        assert!(mt::where_(&a, &a, &a).unwrap_err().to_string().contains("condition must be bool"));
        assert!(a.reshape(&[4, -1]).unwrap_err().to_string().starts_with("[reshape]"));
    }
    if let Some(&g) = gpus().first() {
        let a = mt::zeros(&[2], DType::F32, Place::Cpu).unwrap();
        let b = mt::zeros(&[2], DType::F32, g).unwrap();
        assert!(mt::add(&a, &b).unwrap_err().to_string().contains("same place"));
        let d = mt::zeros(&[2], DType::F64, Place::Cpu).unwrap();
        let e = d.to(g).unwrap_err();
        assert_eq!(e.kind, mt::ErrorKind::DType);
        assert!(
            e.to_string().contains("float64 is not supported on the GPU")
                && e.to_string().contains("float32"),
            "{e}"
        );
    }
    assert!(mt::zeros(&[1], DType::F32, Place::Gpu(99))
        .unwrap_err()
        .to_string()
        .starts_with("[place]"));
}
