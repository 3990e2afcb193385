//! Every generated elementwise kernel shape — each primitive on each type it accepts, every
//! storage dtype as input and output, every mode — parses, validates and translates to MSL.

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{BinaryFn, ElementwiseSpec, Expr, Mode, UnaryFn, VType};

const UNARY: [UnaryFn; 22] = [
    UnaryFn::Neg,
    UnaryFn::Abs,
    UnaryFn::Sign,
    UnaryFn::Relu,
    UnaryFn::Exp,
    UnaryFn::Log,
    UnaryFn::Sqrt,
    UnaryFn::Sigmoid,
    UnaryFn::Tanh,
    UnaryFn::Erf,
    UnaryFn::Floor,
    UnaryFn::Ceil,
    UnaryFn::Round,
    UnaryFn::Sin,
    UnaryFn::Cos,
    UnaryFn::Recip,
    UnaryFn::Not,
    UnaryFn::IsNan,
    UnaryFn::Asin,
    UnaryFn::Acos,
    UnaryFn::Atan,
    UnaryFn::BitNot,
];
const BINARY: [BinaryFn; 20] = [
    BinaryFn::Add,
    BinaryFn::Sub,
    BinaryFn::Mul,
    BinaryFn::Div,
    BinaryFn::Pow,
    BinaryFn::Max,
    BinaryFn::Min,
    BinaryFn::Eq,
    BinaryFn::Ne,
    BinaryFn::Lt,
    BinaryFn::Le,
    BinaryFn::Gt,
    BinaryFn::Ge,
    BinaryFn::And,
    BinaryFn::Or,
    BinaryFn::BitAnd,
    BinaryFn::BitOr,
    BinaryFn::BitXor,
    BinaryFn::Shl,
    BinaryFn::Shr,
];
const GPU_DTYPES: [DType; 6] =
    [DType::Bool, DType::U8, DType::I8, DType::I32, DType::F16, DType::F32];

fn dtype_for(t: VType) -> DType {
    match t {
        VType::Float => DType::F32,
        VType::Int => DType::I32,
        VType::Bool => DType::Bool,
    }
}

fn check(spec: &ElementwiseSpec) -> usize {
    let src = spec.render().unwrap_or_else(|e| panic!("{spec:?} did not render: {e}"));
    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n--- source ---\n{src}"));
    1
}

#[test]
fn every_primitive_on_every_accepted_type() {
    let mut n = 0;
    for t in [VType::Float, VType::Int, VType::Bool] {
        let d = dtype_for(t);
        for f in UNARY {
            let expr = Expr::unary(f, Expr::input(0));
            let Ok(out) = expr.ty(&[t]) else { continue };
            n += check(&ElementwiseSpec {
                inputs: vec![d],
                output: dtype_for(out),
                num_scalars: 0,
                expr,
                mode: Mode::Linear,
            });
        }
        for f in BINARY {
            let expr = Expr::binary(f, Expr::input(0), Expr::Scalar(0, t));
            let Ok(out) = expr.ty(&[t]) else { continue };
            for mode in [Mode::Linear, Mode::Strided { ndim: 3 }] {
                n += check(&ElementwiseSpec {
                    inputs: vec![d],
                    output: dtype_for(out),
                    num_scalars: 1,
                    expr: expr.clone(),
                    mode,
                });
            }
        }
    }
    assert!(n > 60, "only {n} kernels checked");
}

#[test]
fn every_storage_dtype_in_and_out_and_vec4() {
    for &din in &GPU_DTYPES {
        for &dout in &GPU_DTYPES {
            let expr = Expr::cast(VType::of(dout), Expr::input(0));
            for mode in [Mode::Linear, Mode::Strided { ndim: 2 }] {
                check(&ElementwiseSpec {
                    inputs: vec![din],
                    output: dout,
                    num_scalars: 0,
                    expr: expr.clone(),
                    mode,
                });
            }
        }
    }
    let add = Expr::binary(BinaryFn::Add, Expr::input(0), Expr::input(1));
    for d in [DType::F32, DType::I32] {
        check(&ElementwiseSpec {
            inputs: vec![d, d],
            output: d,
            num_scalars: 0,
            expr: add.clone(),
            mode: Mode::Vec4,
        });
    }
    let wh = Expr::select(Expr::input(0), Expr::input(1), Expr::input(2));
    check(&ElementwiseSpec {
        inputs: vec![DType::Bool, DType::F16, DType::F16],
        output: DType::F16,
        num_scalars: 0,
        expr: wh,
        mode: Mode::Strided { ndim: 4 },
    });
}

#[test]
fn ill_typed_expressions_are_rejected() {
    let bad = [
        (Expr::unary(UnaryFn::Exp, Expr::input(0)), DType::I32),
        (Expr::binary(BinaryFn::Add, Expr::input(0), Expr::Scalar(0, VType::Float)), DType::I32),
        (Expr::unary(UnaryFn::Not, Expr::input(0)), DType::F32),
        (Expr::input(3), DType::F32),
    ];
    for (expr, d) in bad {
        let spec = ElementwiseSpec {
            inputs: vec![d],
            output: d,
            num_scalars: 1,
            expr,
            mode: Mode::Linear,
        };
        assert!(spec.render().is_err(), "{spec:?} should not render");
    }
    let f64spec = ElementwiseSpec {
        inputs: vec![DType::F64],
        output: DType::F64,
        num_scalars: 0,
        expr: Expr::input(0),
        mode: Mode::Linear,
    };
    assert!(f64spec.render().unwrap_err().contains("float64"));
}

#[test]
fn every_static_wgsl_file_translates_to_msl() {
    for (name, src) in mpsrt_kernels::STATIC_SOURCES {
        wgsl_to_msl(src).unwrap_or_else(|e| panic!("{name}.wgsl: {e}"));
    }
}
