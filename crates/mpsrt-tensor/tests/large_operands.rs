//! Every op family on operands larger than one storage binding, against the CPU reference:
//! `MPSRT_MAX_BINDING_BYTES=65536` lowers the limit for this process (own test binary: the
//! variable is read when the GPU device opens), so ~300 KB tensors take the windowed paths of
//! `gpu/window.rs` (several dispatches over sub-ranges bound at 256-byte-aligned offsets).
//! Sizes really past lavapipe's 128 MiB are in `past_binding_limit.rs`.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, BinaryFn, DType, ErrorKind, Expr, Place, Scalar, Tensor, UnaryFn};

fn init() {
    std::env::set_var("MPSRT_MAX_BINDING_BYTES", "65536");
}

type Op = fn(&[Tensor], Place) -> mt::Result<Tensor>;

/// Inputs (built on the CPU) and the op, run on each place.
struct Case {
    name: &'static str,
    inputs: Vec<Tensor>,
    op: Op,
    tol: f64,
}

fn case(name: &'static str, inputs: Vec<Tensor>, op: Op, tol: f64) -> Case {
    Case { name, inputs, op, tol }
}

fn f32s(shape: &[usize], seed: u64) -> Tensor {
    tensor(&values(shape.iter().product(), seed, false), shape, DType::F32)
}

fn cases() -> Vec<Case> {
    let big = || f32s(&[300, 257], 1); // 308 KB: 5 windows of 64 KiB
    let mut v = vec![
        // Creation / fill (one element broadcast), narrow packed outputs too.
        case("ones f32", vec![], |_, p| mt::ones(&[300, 257], DType::F32, p), 0.0),
        case("full f16", vec![], |_, p| mt::full(&[700, 257], 1.5, DType::F16, p), 0.0),
        case("full u8", vec![], |_, p| mt::full(&[1000, 257], 7, DType::U8, p), 0.0),
        // Copies: transposed, stepped and offset views made contiguous.
        case(
            "transpose copy",
            vec![f32s(&[1000, 60], 2)],
            |x, _| x[0].transpose(0, 1)?.contiguous(),
            0.0,
        ),
        // Output rows (300, 600) not a multiple of the 64-element alignment: ranges end where
        // a row ends and the output is bound from the aligned element before the next range.
        case(
            "transpose copy, short rows",
            vec![f32s(&[300, 60], 19)],
            |x, _| x[0].transpose(0, 1)?.contiguous(),
            0.0,
        ),
        case(
            "transpose copy f16",
            vec![f32s(&[600, 70], 20).astype(DType::F16).unwrap()],
            |x, _| x[0].transpose(0, 1)?.contiguous(),
            0.0,
        ),
        case(
            "stepped slice copy",
            vec![f32s(&[600, 257], 3)],
            |x, _| x[0].slice(0, Some(1), None, 2)?.slice(1, Some(3), None, 1)?.contiguous(),
            0.0,
        ),
        // Casts (packed f16 / u8 / bool in and out).
        case(
            "f32 -> f16 -> f32",
            vec![big()],
            |x, _| x[0].astype(DType::F16)?.astype(DType::F32),
            0.0,
        ),
        case("f32 -> i32", vec![big()], |x, _| x[0].astype(DType::I32), 0.0),
        case(
            "u8 -> f32",
            vec![big().astype(DType::U8).unwrap()],
            |x, _| x[0].astype(DType::F32),
            0.0,
        ),
        case("f32 > 0 (bool)", vec![big()], |x, _| mt::greater(&x[0], &mt::neg(&x[0])?), 0.0),
        // Elementwise: same shape, broadcast, unary, fused expression, where.
        case("add", vec![big(), f32s(&[300, 257], 4)], |x, _| mt::add(&x[0], &x[1]), 1e-6),
        case(
            "mul broadcast row",
            vec![big(), f32s(&[257], 5)],
            |x, _| mt::multiply(&x[0], &x[1]),
            1e-6,
        ),
        case(
            "sub broadcast column",
            vec![big(), f32s(&[300, 1], 6)],
            |x, _| mt::subtract(&x[0], &x[1]),
            1e-6,
        ),
        case("gelu", vec![big()], |x, _| mt::gelu(&x[0], false), 1e-5),
        case(
            "fused exp(a) * b + 0.5",
            vec![big(), f32s(&[300, 257], 7)],
            |x, _| {
                let e = Expr::binary(
                    BinaryFn::Add,
                    Expr::binary(
                        BinaryFn::Mul,
                        Expr::unary(UnaryFn::Exp, Expr::input(0)),
                        Expr::input(1),
                    ),
                    Expr::Scalar(0, mt::VType::Float),
                );
                mt::fused_elementwise("fused", &[&x[0], &x[1]], DType::F32, e, &[Scalar::F(0.5)])
            },
            1e-5,
        ),
        case(
            "where",
            vec![big(), f32s(&[300, 257], 8)],
            |x, _| mt::where_(&mt::greater(&x[0], &x[1])?, &x[0], &x[1]),
            0.0,
        ),
        // Reductions: rows, columns (split along the reduced axis), everything, f16 input.
        case("sum rows", vec![big()], |x, _| mt::sum(&x[0], Some(&[1]), false), 1e-4),
        case("mean columns", vec![big()], |x, _| mt::mean(&x[0], Some(&[0]), false), 1e-4),
        case("max all", vec![big()], |x, _| mt::max(&x[0], None, false), 0.0),
        case("sum all", vec![f32s(&[200_000], 9)], |x, _| mt::sum(&x[0], None, false), 1e-3),
        case("norm all", vec![big()], |x, _| mt::norm(&x[0], None, false), 1e-4),
        case("argmax rows", vec![big()], |x, _| mt::argmax(&x[0], Some(1), false), 0.0),
        case("var rows", vec![big()], |x, _| mt::var(&x[0], Some(&[1]), 1.0, false), 1e-4),
        case(
            "sum rows f16",
            vec![big().astype(DType::F16).unwrap()],
            |x, _| mt::sum(&x[0], Some(&[1]), false),
            1e-2,
        ),
        // Row ops: softmax over rows (windowed by rows), over columns (strided rows), norms.
        case("softmax rows", vec![big()], |x, _| mt::softmax(&x[0], -1), 1e-5),
        case("log_softmax rows", vec![big()], |x, _| mt::log_softmax(&x[0], 1), 1e-5),
        case(
            "softmax strided rows",
            vec![f32s(&[8, 60, 250], 10)],
            |x, _| mt::softmax(&x[0], 1),
            1e-5,
        ),
        case(
            "layer_norm",
            vec![big(), f32s(&[257], 11), f32s(&[257], 12)],
            |x, _| mt::layer_norm(&x[0], &[257], Some(&x[1]), Some(&x[2]), 1e-5),
            1e-4,
        ),
        // Data movement: concat along both axes, gather / index_select rows of a large table.
        case(
            "concat axis 0",
            vec![big(), f32s(&[100, 257], 13)],
            |x, _| mt::concat(&[&x[0], &x[1]], 0),
            0.0,
        ),
        case(
            "concat axis 1",
            vec![big(), f32s(&[300, 100], 14)],
            |x, _| mt::concat(&[&x[0], &x[1]], 1),
            0.0,
        ),
        case(
            "index_select rows",
            vec![
                f32s(&[1000, 64], 15),
                tensor(&[999.0, 0.0, 500.0, 3.0, 999.0, 250.0], &[6], DType::I32),
            ],
            |x, _| mt::index_select(&x[0], 0, &x[1]),
            0.0,
        ),
        case(
            "gather columns",
            vec![big(), tensor(&[256.0, 0.0, 17.0], &[3], DType::I32)],
            |x, _| mt::gather(&x[0], &x[1], 1),
            0.0,
        ),
        case(
            "pad",
            vec![big()],
            |x, _| mt::pad(&x[0], &[(2, 1), (0, 3)], mt::PadMode::Constant(0.25)),
            0.0,
        ),
    ];
    v.extend(transposed_cases());
    v.extend(gemm_cases());
    v.extend(row_cases());
    v.extend(pool_cases());
    v
}

/// Transposed reads whose neighbouring outputs lie a binding apart (one vec4 / packed word of
/// the output reads sources N elements apart): split along the transposed dim into launches
/// scattered into place (`gpu/elementwise.rs::split`), packed outputs through f32/i32.
fn transposed_cases() -> Vec<Case> {
    let t = |x: &[Tensor], _| x[0].transpose(0, 1)?.contiguous();
    let bools = |shape: &[usize], seed| {
        let x = f32s(shape, seed);
        mt::greater(&x, &mt::neg(&x).unwrap()).unwrap()
    };
    vec![
        // 3 rows of 6000 f32 = 72 KB between the first and last source of one output vec4.
        case("transpose copy [4, N] f32", vec![f32s(&[4, 6000], 80)], t, 0.0),
        case("transpose copy [3, N] f32 (odd)", vec![f32s(&[3, 9001], 81)], t, 0.0),
        // Both dims large: blocks of several source rows per launch.
        case("transpose copy [300, 257] f32", vec![f32s(&[300, 257], 82)], t, 0.0),
        case(
            "transpose copy [4, N] f16",
            vec![f32s(&[4, 12_000], 83).astype(DType::F16).unwrap()],
            t,
            0.0,
        ),
        case(
            "transpose copy [2, N] f16 (sources 80 KB apart)",
            vec![f32s(&[2, 40_000], 84).astype(DType::F16).unwrap()],
            t,
            0.0,
        ),
        case(
            "transpose copy [3, N] u8",
            vec![f32s(&[3, 36_001], 85).astype(DType::U8).unwrap()],
            t,
            0.0,
        ),
        case("transpose copy [4, N] bool", vec![bools(&[4, 24_000], 86)], t, 0.0),
        // Two dims read a binding apart: split along one, then (recursively) the other.
        case(
            "transpose(0, 2) copy [3, 8, 3000] f32",
            vec![f32s(&[3, 8, 3000], 92)],
            |x, _| x[0].transpose(0, 2)?.contiguous(),
            0.0,
        ),
        case(
            "add, one operand transposed",
            vec![f32s(&[6000, 4], 87), f32s(&[4, 6000], 88)],
            |x, _| mt::add(&x[0], &x[1].transpose(0, 1)?),
            1e-6,
        ),
        case(
            "greater (bool out), one operand transposed",
            vec![f32s(&[24_000, 4], 89), f32s(&[4, 24_000], 90)],
            |x, _| mt::greater(&x[0], &x[1].transpose(0, 1)?),
            0.0,
        ),
        // Strided copies (pad, concat) of a transposed view.
        case(
            "pad of a transposed [4, N]",
            vec![f32s(&[4, 6000], 93)],
            |x, _| mt::pad(&x[0].transpose(0, 1)?, &[(1, 2), (3, 0)], mt::PadMode::Constant(0.5)),
            0.0,
        ),
        case(
            "concat of transposed [4, N] views along axis 1",
            vec![f32s(&[4, 6000], 94), f32s(&[3, 6000], 95)],
            |x, _| mt::concat(&[&x[0].transpose(0, 1)?, &x[1].transpose(0, 1)?], 1),
            0.0,
        ),
        case(
            "cast f32 -> f16 of a transposed [3, N]",
            vec![f32s(&[3, 9001], 91)],
            |x, _| x[0].transpose(0, 1)?.astype(DType::F16),
            0.0,
        ),
    ]
}

/// GEMM operands past one binding: A, B, C and the output (rows of A / columns of B), batches,
/// transposes, f16, and K split when one row of A or column of B alone exceeds a binding.
fn gemm_cases() -> Vec<Case> {
    vec![
        case(
            "matmul big A",
            vec![f32s(&[300, 257], 30), f32s(&[257, 40], 31)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-4,
        ),
        case(
            "matmul big B (row-major)",
            vec![f32s(&[20, 257], 32), f32s(&[257, 300], 33)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-4,
        ),
        case(
            "matmul big output",
            vec![f32s(&[300, 32], 34), f32s(&[32, 300], 35)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-4,
        ),
        case(
            "gemm transA transB + big C, alpha/beta",
            vec![f32s(&[257, 300], 36), f32s(&[100, 257], 37), f32s(&[300, 100], 38)],
            |x, _| mt::gemm(&x[0], &x[1], Some(&x[2]), 0.5, 2.0, true, true),
            1e-4,
        ),
        case(
            "gemm_act relu + row bias",
            vec![f32s(&[300, 257], 39), f32s(&[257, 64], 40), f32s(&[64], 41)],
            |x, _| {
                mt::gemm_act(
                    &x[0],
                    &x[1],
                    Some(&x[2]),
                    1.0,
                    1.0,
                    false,
                    false,
                    Some(mt::Activation::Relu),
                )
            },
            1e-4,
        ),
        case(
            "linear big weight + bias",
            vec![f32s(&[3, 257], 42), f32s(&[300, 257], 43), f32s(&[300], 44)],
            |x, _| mt::linear(&x[0], &x[1], Some(&x[2])),
            1e-4,
        ),
        case(
            "batched matmul, broadcast B",
            vec![f32s(&[4, 100, 70], 45), f32s(&[70, 30], 46)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-4,
        ),
        case(
            "batched matmul, transposed A views",
            vec![f32s(&[3, 257, 60], 47), f32s(&[3, 257, 20], 48)],
            |x, _| mt::matmul(&x[0].transpose(1, 2)?, &x[1]),
            1e-4,
        ),
        case(
            "matmul K split (rows of A and columns of B past a binding)",
            vec![f32s(&[3, 20_000], 49), f32s(&[20_000, 2], 50)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-3,
        ),
        case(
            "vector @ big matrix (GEMV)",
            vec![f32s(&[257], 51), f32s(&[257, 300], 52)],
            |x, _| mt::matmul(&x[0], &x[1]),
            1e-4,
        ),
        case(
            "matmul f16 big A",
            vec![
                f32s(&[400, 100], 53).astype(DType::F16).unwrap(),
                f32s(&[100, 20], 54).astype(DType::F16).unwrap(),
            ],
            |x, _| mt::matmul(&x[0], &x[1])?.astype(DType::F32),
            2e-2,
        ),
    ]
}

/// Reductions whose single row exceeds a binding, recombined from halves: variance (Chan),
/// arg ops ((value, index) pairs), softmax (logsumexp + a normalising pass), layer_norm.
fn row_cases() -> Vec<Case> {
    let long = || f32s(&[40_000], 60); // 160 KB: one row, 3 bindings' worth
    vec![
        case("var one long row", vec![long()], |x, _| mt::var(&x[0], None, 1.0, false), 1e-4),
        case(
            "std columns (strided rows)",
            vec![f32s(&[300, 257], 61)],
            |x, _| mt::std(&x[0], Some(&[0]), 0.0, true),
            1e-4,
        ),
        case("argmax flat", vec![long()], |x, _| mt::argmax(&x[0], None, false), 0.0),
        case(
            "argmin columns",
            vec![f32s(&[300, 257], 62)],
            |x, _| mt::argmin(&x[0], Some(0), false),
            0.0,
        ),
        case(
            "argmax ints, ties keep the first",
            vec![tensor(
                &(0..40_000).map(|i| ((i * 7) % 50) as f64).collect::<Vec<_>>(),
                &[40_000],
                DType::I32,
            )],
            |x, _| mt::argmax(&x[0], Some(0), true),
            0.0,
        ),
        case("softmax one long row", vec![long()], |x, _| mt::softmax(&x[0], 0), 1e-6),
        case(
            "log_softmax columns",
            vec![f32s(&[30, 2570], 63)],
            |x, _| mt::log_softmax(&x[0], 0),
            1e-5,
        ),
        case(
            "layer_norm long rows",
            vec![f32s(&[2, 20_000], 64), f32s(&[20_000], 65), f32s(&[20_000], 66)],
            |x, _| mt::layer_norm(&x[0], &[20_000], Some(&x[1]), Some(&x[2]), 1e-5),
            1e-4,
        ),
    ]
}

/// Pooling past a binding: blocks of N·C planes, and bands of rows of one plane larger than a
/// binding; max with indices too.
fn pool_cases() -> Vec<Case> {
    let planes = || f32s(&[2, 8, 40, 40], 70); // 102 KB of 6.4 KB planes
    let plane = || f32s(&[1, 2, 150, 150], 71); // each plane 90 KB
    vec![
        case(
            "max_pool2d planes",
            vec![planes()],
            |x, _| mt::max_pool2d(&x[0], &mt::Pool2dOptions::new(2, 2)),
            0.0,
        ),
        case(
            "avg_pool2d planes, padding excluded",
            vec![planes()],
            |x, _| {
                let mut o = mt::Pool2dOptions::new(3, 3);
                o.padding = [1, 1];
                o.stride = Some([1, 1]);
                o.count_include_pad = false;
                mt::avg_pool2d(&x[0], &o)
            },
            1e-5,
        ),
        case(
            "max_pool2d one plane past a binding (row bands)",
            vec![plane()],
            |x, _| {
                let mut o = mt::Pool2dOptions::new(3, 3);
                o.stride = Some([2, 2]);
                o.padding = [1, 1];
                o.dilation = [2, 1];
                mt::max_pool2d(&x[0], &o)
            },
            0.0,
        ),
        case(
            "avg_pool2d row bands, ceil mode",
            vec![plane()],
            |x, _| {
                let mut o = mt::Pool2dOptions::new(3, 3);
                o.stride = Some([2, 2]);
                o.padding = [1, 1];
                o.ceil_mode = true;
                mt::avg_pool2d(&x[0], &o)
            },
            1e-5,
        ),
        case(
            "adaptive_avg_pool2d row bands",
            vec![plane()],
            |x, _| mt::adaptive_avg_pool2d(&x[0], [7, 5]),
            1e-5,
        ),
        case(
            "global_max_pool2d row bands",
            vec![plane()],
            |x, _| mt::global_max_pool2d(&x[0]),
            0.0,
        ),
        case("global_avg_pool2d planes", vec![planes()], |x, _| mt::global_avg_pool2d(&x[0]), 1e-5),
        case(
            "max_pool2d indices, row bands",
            vec![plane()],
            |x, _| Ok(mt::max_pool2d_with_indices(&x[0], &pool_opts())?.1),
            0.0,
        ),
        case(
            "max_pool2d values with indices, planes",
            vec![planes()],
            |x, _| Ok(mt::max_pool2d_with_indices(&x[0], &pool_opts())?.0),
            0.0,
        ),
        case(
            "adaptive_max_pool2d indices",
            vec![plane()],
            |x, _| Ok(mt::adaptive_max_pool2d_with_indices(&x[0], [6, 4])?.1),
            0.0,
        ),
        case(
            "max_pool2d f16 planes",
            vec![planes().astype(DType::F16).unwrap()],
            |x, _| mt::max_pool2d(&x[0], &pool_opts())?.astype(DType::F32),
            0.0,
        ),
    ]
}

fn pool_opts() -> mt::Pool2dOptions {
    let mut o = mt::Pool2dOptions::new(3, 3);
    o.stride = Some([2, 2]);
    o.padding = [1, 1];
    o
}

#[test]
fn every_op_family_matches_cpu_past_a_lowered_binding_limit() {
    init();
    let gpus = gpus();
    if gpus.is_empty() {
        return;
    }
    let mut failures = Vec::new();
    for c in cases() {
        let want =
            (c.op)(&c.inputs, Place::Cpu).unwrap_or_else(|e| panic!("{} on cpu: {e}", c.name));
        for &p in &gpus {
            let ins: Vec<Tensor> = c.inputs.iter().map(|t| t.to(p).unwrap()).collect();
            match (c.op)(&ins, p) {
                Ok(got) => {
                    assert_eq!(got.shape(), want.shape(), "{} shape", c.name);
                    assert_eq!(got.dtype(), want.dtype(), "{} dtype", c.name);
                    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
                    assert_close(&format!("{} on {p}", c.name), &g, &w, c.tol, c.tol);
                }
                Err(e) => failures.push(format!("{}: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "ops failed past the binding limit:\n{}", failures.join("\n"));
}

#[test]
fn what_cannot_be_windowed_is_a_clear_error() {
    init();
    for p in gpus() {
        // A transposed f16 copy whose packed words read sources 80 KB apart is split and
        // runs (`transposed_cases`); one gathered row longer than a binding cannot be: gather
        // binds whole rows.
        let x = f32s(&[2, 20_000], 16).to(p).unwrap();
        let i = tensor(&[1.0], &[1], DType::I32).to(p).unwrap();
        let e = mt::index_select(&x, 0, &i).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfMemory, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("max_storage_buffer_binding_size"), "{msg}");
        // The device keeps working.
        let t: Tensor = mt::ones(&[3], DType::F32, p).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    }
}
