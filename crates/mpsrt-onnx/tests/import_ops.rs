//! Per-op-family import table: single-node models built with prost, checking the typed op the
//! importer produced (including per-opset defaults and attribute-vs-input forms) and the inferred
//! output shape. Plus whole-model behaviours: unsupported-op reports, dtypes, external data.

mod common;

use common::*;
use mpsrt_core::{DType, ErrorKind};
use mpsrt_graph::*;

struct Case {
    opset: i64,
    node: mpsrt_onnx::proto::NodeProto,
    inputs: Vec<(&'static str, &'static [&'static str])>,
    inits: Vec<mpsrt_onnx::proto::TensorProto>,
    op: Op,
    shape: &'static str,
}

fn case(
    opset: i64,
    node: mpsrt_onnx::proto::NodeProto,
    inputs: Vec<(&'static str, &'static [&'static str])>,
    op: Op,
    shape: &'static str,
) -> Case {
    Case { opset, node, inputs, inits: vec![], op, shape }
}

fn with(mut c: Case, inits: Vec<mpsrt_onnx::proto::TensorProto>) -> Case {
    c.inits = inits;
    c
}

fn run_case(c: Case) {
    let label = format!("{} opset {}", c.node.op_type.clone().unwrap(), c.opset);
    let out = c.node.output[0].clone();
    let inputs = c.inputs.iter().map(|(n, d)| vi(n, FLOAT, d)).collect();
    let m = model(c.opset, vec![c.node], inputs, &[&out], c.inits);
    let loaded = mpsrt_onnx::load_bytes(&bytes(&m)).unwrap_or_else(|e| panic!("{label}: {e}"));
    let g = &loaded.graph;
    let last = g.nodes.last().unwrap_or_else(|| panic!("{label}: no nodes"));
    assert_eq!(last.op, c.op, "{label}");
    assert_eq!(shape_str(g.value(g.outputs[0]).shape.as_ref().unwrap()), c.shape, "{label}");
}

#[test]
fn elementwise_family() {
    let x: &'static [&str] = &["N", "4"];
    for c in [
        case(
            13,
            node("Relu", &["x"], &["y"], vec![]),
            vec![("x", x)],
            Op::Unary(UnaryOp::Relu),
            "[N, 4]",
        ),
        case(
            13,
            node("Add", &["x", "z"], &["y"], vec![]),
            vec![("x", x), ("z", &["4"])],
            Op::Binary(BinaryOp::Add),
            "[N, 4]",
        ),
        case(
            13,
            node("LeakyRelu", &["x"], &["y"], vec![]),
            vec![("x", x)],
            Op::LeakyRelu { alpha: 0.01 },
            "[N, 4]",
        ),
        case(
            13,
            node("HardSigmoid", &["x"], &["y"], vec![af("alpha", 0.1)]),
            vec![("x", x)],
            Op::HardSigmoid { alpha: 0.1, beta: 0.5 },
            "[N, 4]",
        ),
        case(
            20,
            node("Gelu", &["x"], &["y"], vec![astr("approximate", "tanh")]),
            vec![("x", x)],
            Op::Gelu { approximate_tanh: true },
            "[N, 4]",
        ),
        case(
            13,
            node("Cast", &["x"], &["y"], vec![ai("to", 10)]),
            vec![("x", x)],
            Op::Cast { to: DType::F16 },
            "[N, 4]",
        ),
        case(
            9,
            node("Clip", &["x"], &["y"], vec![af("min", 0.0), af("max", 6.0)]),
            vec![("x", x)],
            Op::Clip { min: Some(0.0), max: Some(6.0) },
            "[N, 4]",
        ),
        with(
            case(
                13,
                node("Clip", &["x", "", "hi"], &["y"], vec![]),
                vec![("x", x)],
                Op::Clip { min: None, max: Some(6.0) },
                "[N, 4]",
            ),
            vec![tf32("hi", &[], &[6.0])],
        ),
        // Variadic Sum of 3 inputs: the last node is the second Add of the chain.
        case(
            13,
            node("Sum", &["x", "x", "x"], &["y"], vec![]),
            vec![("x", x)],
            Op::Binary(BinaryOp::Add),
            "[N, 4]",
        ),
        case(
            13,
            node("Where", &["x", "x", "x"], &["y"], vec![]),
            vec![("x", x)],
            Op::Where,
            "[N, 4]",
        ),
        case(12, node("Dropout", &["x"], &["y"], vec![]), vec![("x", x)], Op::Dropout, "[N, 4]"),
    ] {
        run_case(c);
    }
}

#[test]
fn conv_pool_norm_family() {
    let img: &'static [&str] = &["N", "3", "8", "8"];
    let w = || vec![tf32("w", &[6, 3, 3, 3], &[0.0; 162])];
    let conv_attrs = ConvAttrs {
        kernel_shape: vec![3, 3],
        pads: vec![1, 1, 1, 1],
        strides: vec![2, 2],
        group: 1,
        ..Default::default()
    };
    for c in [
        with(
            case(
                11,
                node(
                    "Conv",
                    &["x", "w"],
                    &["y"],
                    vec![
                        ais("kernel_shape", &[3, 3]),
                        ais("pads", &[1, 1, 1, 1]),
                        ais("strides", &[2, 2]),
                    ],
                ),
                vec![("x", img)],
                Op::Conv(conv_attrs.clone()),
                "[N, 6, 4, 4]",
            ),
            w(),
        ),
        with(
            case(
                11,
                node("Conv", &["x", "w"], &["y"], vec![astr("auto_pad", "SAME_UPPER")]),
                vec![("x", img)],
                Op::Conv(ConvAttrs {
                    group: 1,
                    auto_pad: AutoPad::SameUpper,
                    ..Default::default()
                }),
                "[N, 6, 8, 8]",
            ),
            w(),
        ),
        with(
            case(
                13,
                node("Gemm", &["a", "w"], &["y"], vec![ai("transB", 1), af("alpha", 2.0)]),
                vec![("a", &["2", "3"])],
                Op::Gemm { alpha: 2.0, beta: 1.0, trans_a: false, trans_b: true },
                "[2, 5]",
            ),
            vec![tf32("w", &[5, 3], &[0.0; 15])],
        ),
        case(
            13,
            node("MatMul", &["a", "b"], &["y"], vec![]),
            vec![("a", &["B", "S", "8"]), ("b", &["8", "16"])],
            Op::MatMul,
            "[B, S, 16]",
        ),
        case(
            10,
            node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![ais("kernel_shape", &[3, 3]), ais("strides", &[2, 2]), ai("ceil_mode", 1)],
            ),
            vec![("x", img)],
            Op::MaxPool(PoolAttrs {
                kernel: vec![3, 3],
                strides: vec![2, 2],
                ceil_mode: true,
                ..Default::default()
            }),
            "[N, 3, 4, 4]",
        ),
        case(
            11,
            node(
                "AveragePool",
                &["x"],
                &["y"],
                vec![
                    ais("kernel_shape", &[2, 2]),
                    ais("strides", &[2, 2]),
                    ai("count_include_pad", 1),
                ],
            ),
            vec![("x", img)],
            Op::AveragePool(PoolAttrs {
                kernel: vec![2, 2],
                strides: vec![2, 2],
                count_include_pad: true,
                ..Default::default()
            }),
            "[N, 3, 4, 4]",
        ),
        case(
            9,
            node("GlobalAveragePool", &["x"], &["y"], vec![]),
            vec![("x", img)],
            Op::GlobalAveragePool,
            "[N, 3, 1, 1]",
        ),
        case(
            9,
            node("LRN", &["x"], &["y"], vec![ai("size", 5)]),
            vec![("x", img)],
            Op::Lrn { size: 5, alpha: 1e-4, beta: 0.75, bias: 1.0 },
            "[N, 3, 8, 8]",
        ),
        // Softmax's axis default and semantics changed in opset 13.
        case(
            11,
            node("Softmax", &["x"], &["y"], vec![]),
            vec![("x", img)],
            Op::SoftmaxFlat { axis: 1, log: false },
            "[N, 3, 8, 8]",
        ),
        case(
            13,
            node("Softmax", &["x"], &["y"], vec![]),
            vec![("x", img)],
            Op::Softmax { axis: -1 },
            "[N, 3, 8, 8]",
        ),
        case(
            13,
            node("LogSoftmax", &["x"], &["y"], vec![ai("axis", 1)]),
            vec![("x", img)],
            Op::LogSoftmax { axis: 1 },
            "[N, 3, 8, 8]",
        ),
        with(
            case(
                17,
                node("LayerNormalization", &["x", "g"], &["y"], vec![ai("axis", -1)]),
                vec![("x", &["B", "S", "4"])],
                Op::LayerNormalization { axis: -1, epsilon: 1e-5 },
                "[B, S, 4]",
            ),
            vec![tf32("g", &[4], &[1.0; 4])],
        ),
    ] {
        run_case(c);
    }
}

#[test]
fn reduce_and_shape_family_across_opsets() {
    let x: &'static [&str] = &["B", "6", "4"];
    let mean = |axes: Option<Vec<i64>>, keepdims| Op::Reduce {
        kind: ReduceKind::Mean,
        axes,
        keepdims,
        noop_with_empty_axes: false,
    };
    for c in [
        case(
            13,
            node("ReduceMean", &["x"], &["y"], vec![ais("axes", &[-1])]),
            vec![("x", x)],
            mean(Some(vec![-1]), true),
            "[B, 6, 1]",
        ),
        with(
            case(
                18,
                node("ReduceMean", &["x", "ax"], &["y"], vec![ai("keepdims", 0)]),
                vec![("x", x)],
                mean(Some(vec![1]), false),
                "[B, 4]",
            ),
            vec![ti64("ax", &[1], &[1])],
        ),
        with(
            case(
                13,
                node("ReduceSum", &["x", "ax"], &["y"], vec![]),
                vec![("x", x)],
                Op::Reduce {
                    kind: ReduceKind::Sum,
                    axes: Some(vec![2]),
                    keepdims: true,
                    noop_with_empty_axes: false,
                },
                "[B, 6, 1]",
            ),
            vec![ti64("ax", &[1], &[2])],
        ),
        case(
            13,
            node("ArgMax", &["x"], &["y"], vec![ai("axis", 1), ai("keepdims", 0)]),
            vec![("x", x)],
            Op::ArgReduce { max: true, axis: 1, keepdims: false, select_last_index: false },
            "[B, 4]",
        ),
        case(
            11,
            node("Unsqueeze", &["x"], &["y"], vec![ais("axes", &[0])]),
            vec![("x", x)],
            Op::Unsqueeze { axes: vec![0] },
            "[1, B, 6, 4]",
        ),
        with(
            case(
                13,
                node("Unsqueeze", &["x", "ax"], &["y"], vec![]),
                vec![("x", x)],
                Op::Unsqueeze { axes: vec![-1] },
                "[B, 6, 4, 1]",
            ),
            vec![ti64("ax", &[1], &[-1])],
        ),
        case(
            13,
            node("Squeeze", &["x"], &["y"], vec![]),
            vec![("x", &["1", "6"])],
            Op::Squeeze { axes: None },
            "[6]",
        ),
        case(
            11,
            node("Split", &["x"], &["y", "z"], vec![ai("axis", 1), ais("split", &[2, 4])]),
            vec![("x", x)],
            Op::Split { axis: 1, splits: Some(vec![2, 4]) },
            "[B, 2, 4]",
        ),
        with(
            case(
                13,
                node("Split", &["x", "sp"], &["y", "z"], vec![ai("axis", 1)]),
                vec![("x", x)],
                Op::Split { axis: 1, splits: Some(vec![1, 5]) },
                "[B, 1, 4]",
            ),
            vec![ti64("sp", &[2], &[1, 5])],
        ),
        // Slice attributes (opset < 10) become constant inputs.
        case(
            9,
            node(
                "Slice",
                &["x"],
                &["y"],
                vec![ais("starts", &[1]), ais("ends", &[3]), ais("axes", &[1])],
            ),
            vec![("x", x)],
            Op::Slice,
            "[B, 2, 4]",
        ),
        with(
            case(
                13,
                node("Slice", &["x", "st", "en", "", "stp"], &["y"], vec![]),
                vec![("x", x)],
                Op::Slice,
                "[B, 3, 4]",
            ),
            vec![
                ti64("st", &[2], &[0, 0]),
                ti64("en", &[2], &[i64::MAX, 6]),
                ti64("stp", &[2], &[1, 2]),
            ],
        ),
        case(
            13,
            node("Transpose", &["x"], &["y"], vec![ais("perm", &[0, 2, 1])]),
            vec![("x", x)],
            Op::Transpose { perm: Some(vec![0, 2, 1]) },
            "[B, 4, 6]",
        ),
        case(
            13,
            node("Flatten", &["x"], &["y"], vec![]),
            vec![("x", x)],
            Op::Flatten { axis: 1 },
            "[B, 24]",
        ),
        with(
            case(
                13,
                node("Reshape", &["x", "s"], &["y"], vec![]),
                vec![("x", x)],
                Op::Reshape { allowzero: false },
                "[B, 24]",
            ),
            vec![ti64("s", &[2], &[0, -1])],
        ),
        case(
            15,
            node("Shape", &["x"], &["y"], vec![ai("start", 1)]),
            vec![("x", x)],
            Op::Shape { start: 1, end: None },
            "[2]",
        ),
        case(
            13,
            node("Concat", &["x", "x"], &["y"], vec![ai("axis", -1)]),
            vec![("x", x)],
            Op::Concat { axis: -1 },
            "[B, 6, 8]",
        ),
        with(
            case(
                13,
                node("Gather", &["x", "i"], &["y"], vec![ai("axis", 1)]),
                vec![("x", x)],
                Op::Gather { axis: 1 },
                "[B, 3, 4]",
            ),
            vec![ti64("i", &[3], &[0, 1, 5])],
        ),
        with(
            case(
                11,
                node("Pad", &["x", "p"], &["y"], vec![astr("mode", "reflect")]),
                vec![("x", x)],
                Op::Pad { mode: PadMode::Reflect, pads: vec![0, 1, 0, 0, 1, 2], value: 0.0 },
                "[B, 8, 6]",
            ),
            vec![ti64("p", &[6], &[0, 1, 0, 0, 1, 2])],
        ),
        case(
            7,
            node("Pad", &["x"], &["y"], vec![ais("pads", &[0, 0, 1, 0, 0, 1]), af("value", 2.0)]),
            vec![("x", x)],
            Op::Pad { mode: PadMode::Constant, pads: vec![0, 0, 1, 0, 0, 1], value: 2.0 },
            "[B, 6, 6]",
        ),
        with(
            case(
                13,
                node("Expand", &["x", "s"], &["y"], vec![]),
                vec![("x", &["3", "1"])],
                Op::Expand,
                "[2, 3, 5]",
            ),
            vec![ti64("s", &[3], &[2, 1, 5])],
        ),
        with(
            case(
                13,
                node("Resize", &["x", "", "sc"], &["y"], vec![astr("mode", "linear")]),
                vec![("x", &["1", "2", "3", "4"])],
                Op::Resize(ResizeAttrs {
                    mode: ResizeMode::Linear,
                    coord: CoordTransform::HalfPixel,
                    nearest: NearestRounding::RoundPreferFloor,
                    cubic_coeff_a: -0.75,
                    exclude_outside: false,
                    antialias: false,
                    scales: vec![1.0, 1.0, 2.0, 1.5],
                    sizes: vec![],
                    sizes_input: false,
                    axes: vec![],
                    keep_aspect: KeepAspect::Stretch,
                    roi: vec![],
                    extrapolation_value: 0.0,
                }),
                "[1, 2, 6, 6]",
            ),
            vec![tf32("sc", &[4], &[1.0, 1.0, 2.0, 1.5])],
        ),
        case(
            13,
            node("CastLike", &["x", "x"], &["y"], vec![]),
            vec![("x", x)],
            Op::Cast { to: DType::F32 },
            "[B, 6, 4]",
        ),
    ] {
        run_case(c);
    }
}

#[test]
fn constants_become_initializers_and_fold() {
    let m = model(
        13,
        vec![
            node("Constant", &[], &["c"], vec![at("value", ti64("", &[2], &[3, -1]))]),
            node("ConstantOfShape", &["c2"], &["z"], vec![at("value", tf32("", &[1], &[1.5]))]),
            node("Reshape", &["x", "c"], &["y"], vec![]),
            node("Add", &["y", "z"], &["out"], vec![]),
        ],
        vec![vi("x", FLOAT, &["6"])],
        &["out"],
        vec![ti64("c2", &[2], &[3, 2])],
    );
    let g = mpsrt_onnx::load_bytes(&bytes(&m)).unwrap().graph;
    let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["Reshape", "Add"], "Constant and small ConstantOfShape folded");
    assert_eq!(shape_str(g.value(g.outputs[0]).shape.as_ref().unwrap()), "[3, 2]");
}

#[test]
fn unsupported_ops_are_all_listed_at_load() {
    let m = model(
        13,
        vec![
            node("NonMaxSuppression", &["x"], &["a"], vec![]),
            node("NonMaxSuppression", &["x"], &["b"], vec![]),
            node("RoiAlign", &["x"], &["c"], vec![]),
            node("Loop", &["x"], &["d"], vec![]),
            node("Relu", &["x"], &["e"], vec![]),
        ],
        vec![vi("x", FLOAT, &["1"])],
        &["e"],
        vec![],
    );
    let err = mpsrt_onnx::load_bytes(&bytes(&m)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unsupported);
    assert_eq!(err.to_string(), "[onnx] model uses 3 unsupported op types: NonMaxSuppression \u{d7}2, Loop \u{d7}1, RoiAlign \u{d7}1");

    let err = mpsrt_onnx::load_bytes(&bytes(&model(6, vec![], vec![], &[], vec![]))).unwrap_err();
    assert!(err.to_string().contains("opset 6; mpsrt supports opsets 7 to"), "{err}");
    // Load-time rejection of an unsupported attribute form names the node.
    let m = model(
        13,
        vec![node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![ais("kernel_shape", &[1, 1]), ai("storage_order", 1)],
        )],
        vec![vi("x", FLOAT, &["1", "1", "2", "2"])],
        &["y"],
        vec![],
    );
    assert_eq!(
        mpsrt_onnx::load_bytes(&bytes(&m)).unwrap_err().to_string(),
        "[MaxPool MaxPool_0] storage_order=1 is not supported"
    );
}

#[test]
fn tensor_dtypes_are_mapped_or_rejected_by_name() {
    let load = |t: mpsrt_onnx::proto::TensorProto| mpsrt_onnx::tensor::to_host(&t, None);
    let f16 = load(raw("h", 10, &[2], vec![0x00, 0x3c, 0x00, 0xc0])).unwrap();
    assert_eq!((f16.dtype, f16.to_f64_vec()), (DType::F16, vec![1.0, -2.0]));
    let i16 = load(raw("s", 5, &[2], vec![0xff, 0xff, 0x02, 0x00])).unwrap();
    assert_eq!((i16.dtype, i16.to_i64_vec()), (DType::I32, vec![-1, 2]));
    let u16 = load(raw("u", 4, &[1], vec![0xff, 0xff])).unwrap();
    assert_eq!((u16.dtype, u16.to_i64_vec()), (DType::I32, vec![65535]));
    let u32 = load(raw("u32", 12, &[1], vec![0xff; 4])).unwrap();
    assert_eq!((u32.dtype, u32.to_i64_vec()), (DType::I64, vec![4294967295]));
    let b = load(raw("b", BOOL, &[2], vec![0, 7])).unwrap();
    assert_eq!((b.dtype, b.bytes.clone()), (DType::Bool, vec![0, 1]));
    let d = load(mpsrt_onnx::proto::TensorProto {
        data_type: Some(11),
        dims: vec![1],
        double_data: vec![2.5],
        ..Default::default()
    })
    .unwrap();
    assert_eq!((d.dtype, d.to_f64_vec()), (DType::F64, vec![2.5]));

    let err = load(raw("big", 13, &[1], vec![0xff; 8])).unwrap_err().to_string();
    assert!(err.contains("tensor \"big\": value 18446744073709551615 does not fit int64"), "{err}");
    let err = load(raw("bf", 16, &[1], vec![0; 2])).unwrap_err();
    assert_eq!(
        (err.kind, err.to_string()),
        (
            ErrorKind::Unsupported,
            "[onnx] tensor \"bf\": ONNX element type BFLOAT16 is not supported by mpsrt".into()
        )
    );
    assert!(load(raw("str", 8, &[1], vec![]))
        .unwrap_err()
        .to_string()
        .contains("tensor \"str\": ONNX element type STRING"));
    let err = load(raw("short", FLOAT, &[2, 2], vec![0; 12])).unwrap_err().to_string();
    assert!(err.contains("needs 4 elements but the data holds 3"), "{err}");
    assert!(load(tf32("neg", &[-1], &[])).is_err());
    assert!(load(tf32("huge", &[i64::MAX, i64::MAX], &[])).is_err());
}

#[test]
fn declared_io_types_and_shapes_are_kept_before_widening() {
    use mpsrt_onnx::proto::type_proto::Value;
    let x = vi("x", 4, &["N", "", "3"]); // UINT16: stored as int32
    let mut m = model(13, vec![node("Neg", &["x"], &["y"], vec![])], vec![x], &[], vec![]);
    let mut x_out = vi("x", 8, &[]); // STRING, no shape: nothing mpsrt can use
    if let Some(Value::TensorType(t)) = x_out.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        t.shape = None;
    }
    // UINT32 although the graph computes int32: the declaration is kept as given.
    m.graph.as_mut().unwrap().output = vec![vi("y", 12, &["N", "", "-1"]), x_out];
    let g = mpsrt_onnx::load_bytes(&bytes(&m)).unwrap().graph;
    let (sym, n) = (|s: &str| Dim::Sym(s.into()), Dim::Known);

    let ins = g.input_signature();
    assert_eq!(ins[0].dtype, DType::I32);
    assert_eq!(ins[0].shape, Some(vec![sym("N"), sym("x:1"), n(3)]));
    let decl = Some(vec![Some(sym("N")), None, Some(n(3))]);
    assert_eq!(ins[0].declared, Declared { elem: Some(ElemType::U16), shape: decl });
    assert_eq!(ElemType::U16.name(), "uint16");

    let outs = g.output_signature();
    assert_eq!((outs[0].name.as_str(), outs[0].dtype), ("y", DType::I32));
    let decl = Some(vec![Some(sym("N")), None, None]);
    assert_eq!(outs[0].declared, Declared { elem: Some(ElemType::U32), shape: decl });
    // The input listed as an output keeps both declarations apart.
    assert_eq!((outs[1].name.as_str(), &outs[1].declared), ("x", &Declared::default()));
}

fn external(
    name: &str,
    location: &str,
    offset: i64,
    length: i64,
) -> mpsrt_onnx::proto::TensorProto {
    use mpsrt_onnx::proto::StringStringEntryProto as E;
    let e = |k: &str, v: String| E { key: Some(k.into()), value: Some(v) };
    mpsrt_onnx::proto::TensorProto {
        name: Some(name.into()),
        dims: vec![2],
        data_type: Some(FLOAT),
        data_location: Some(1),
        external_data: vec![
            e("location", location.into()),
            e("offset", offset.to_string()),
            e("length", length.to_string()),
        ],
        ..Default::default()
    }
}

#[test]
fn external_data_is_read_relative_to_the_model_and_confined_to_its_directory() {
    let dir = std::env::temp_dir().join(format!("mpsrt-onnx-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut data = vec![0u8; 4];
    data.extend(1.5f32.to_le_bytes());
    data.extend(2.5f32.to_le_bytes());
    std::fs::write(dir.join("weights.bin"), &data).unwrap();
    let mk = |t| {
        model(
            13,
            vec![node("Add", &["x", "w"], &["y"], vec![])],
            vec![vi("x", FLOAT, &["2"])],
            &["y"],
            vec![t],
        )
    };

    std::fs::write(dir.join("ok.onnx"), bytes(&mk(external("w", "weights.bin", 4, 8)))).unwrap();
    let g = mpsrt_onnx::load_path(dir.join("ok.onnx")).unwrap().graph;
    let w = g.initializers.get(&g.find("w").unwrap()).unwrap();
    assert_eq!(w.to_f64_vec(), vec![1.5, 2.5]);

    for (loc, off, len, want) in [
        ("../weights.bin", 0, 8, "escapes the model directory"),
        ("/etc/passwd", 0, 8, "escapes the model directory"),
        ("weights.bin", 8, 8, "past the end"),
        ("missing.bin", 0, 8, "cannot read external data"),
    ] {
        std::fs::write(dir.join("bad.onnx"), bytes(&mk(external("w", loc, off, len)))).unwrap();
        let err = mpsrt_onnx::load_path(dir.join("bad.onnx")).unwrap_err().to_string();
        assert!(err.contains(want), "{loc}: {err}");
    }
    let err = mpsrt_onnx::load_bytes(&bytes(&mk(external("w", "weights.bin", 4, 8))))
        .unwrap_err()
        .to_string();
    assert!(err.contains("load the model from a path"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn small_cnn_specializes_per_batch() {
    let model = mpsrt_onnx::load_bytes(&bytes(&small_cnn())).unwrap();
    let compiled = CompiledGraph::new(model.graph, PlanOptions::default()).unwrap();
    for batch in [1, 3] {
        let plan = compiled.plan(&[vec![batch, 2, 8, 8]]).unwrap();
        assert_eq!(plan.shape(plan.graph.outputs[0]), vec![batch, 3]);
        assert!(plan
            .graph
            .nodes
            .iter()
            .all(|n| !matches!(n.op, Op::Shape { .. } | Op::Gather { .. } | Op::Concat { .. })));
    }
    assert_eq!(compiled.cached_plans(), 2);
    let err = compiled.plan(&[vec![1, 3, 8, 8]]).unwrap_err().to_string();
    assert!(err.contains("input \"x\" expects shape [N, 2, 8, 8], got [1, 3, 8, 8]"), "{err}");
}
