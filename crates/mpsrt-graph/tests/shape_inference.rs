//! Table-driven shape inference: one row per case, expected shapes derived by hand from the
//! ONNX operator definitions.

mod common;

use mpsrt_core::DType;
use mpsrt_graph::*;

fn conv(k: usize, s: usize, p: usize, d: usize, group: usize, auto_pad: AutoPad) -> Op {
    Op::Conv(ConvAttrs {
        kernel_shape: vec![k, k],
        strides: vec![s, s],
        pads: vec![p; 4],
        dilations: vec![d, d],
        group,
        auto_pad,
    })
}

fn pool(k: usize, s: usize, p: usize, ceil_mode: bool) -> PoolAttrs {
    PoolAttrs {
        kernel: vec![k, k],
        strides: vec![s, s],
        pads: vec![p; 4],
        ceil_mode,
        ..Default::default()
    }
}

fn reduce(axes: &[i64], keepdims: bool) -> Op {
    Op::Reduce {
        kind: ReduceKind::Mean,
        axes: Some(axes.to_vec()),
        keepdims,
        noop_with_empty_axes: false,
    }
}

#[test]
fn shape_inference_table() {
    let bin = |b| Op::Binary(b);
    let cases: Vec<(Op, Vec<&str>, Vec<&str>)> = vec![
        (bin(BinaryOp::Add), vec!["f32[N,1,5]", "f32[3,1]"], vec!["[N, 3, 5]"]),
        (bin(BinaryOp::Less), vec!["f32[2,3]", "f32[3]"], vec!["[2, 3]"]),
        (Op::MatMul, vec!["f32[B,4,3]", "f32[3,7]"], vec!["[B, 4, 7]"]),
        (Op::MatMul, vec!["f32[3]", "f32[3,7]"], vec!["[7]"]),
        (Op::MatMul, vec!["f32[2,1,4,3]", "f32[5,3,6]"], vec!["[2, 5, 4, 6]"]),
        (
            Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true },
            vec!["f32[2,3]", "f32[5,3]"],
            vec!["[2, 5]"],
        ),
        (
            conv(3, 2, 1, 1, 1, AutoPad::NotSet),
            vec!["f32[1,3,224,224]", "f32[64,3,3,3]"],
            vec!["[1, 64, 112, 112]"],
        ),
        (
            conv(3, 1, 0, 2, 2, AutoPad::NotSet),
            vec!["f32[N,4,10,10]", "f32[8,2,3,3]"],
            vec!["[N, 8, 6, 6]"],
        ),
        (
            conv(3, 2, 0, 1, 1, AutoPad::SameUpper),
            vec!["f32[1,1,7,7]", "f32[1,1,3,3]"],
            vec!["[1, 1, 4, 4]"],
        ),
        (
            conv(3, 1, 0, 1, 1, AutoPad::Valid),
            vec!["f32[1,1,7,7]", "f32[2,1,3,3]"],
            vec!["[1, 2, 5, 5]"],
        ),
        (
            Op::ConvTranspose(ConvTransposeAttrs {
                conv: ConvAttrs { strides: vec![2, 2], group: 1, ..Default::default() },
                ..Default::default()
            }),
            vec!["f32[1,4,5,5]", "f32[4,2,3,3]"],
            vec!["[1, 2, 11, 11]"],
        ),
        (Op::MaxPool(pool(3, 2, 1, false)), vec!["f32[1,64,112,112]"], vec!["[1, 64, 56, 56]"]),
        (Op::MaxPool(pool(3, 2, 0, true)), vec!["f32[1,1,6,6]"], vec!["[1, 1, 3, 3]"]),
        (Op::MaxPool(pool(3, 2, 0, false)), vec!["f32[1,1,6,6]"], vec!["[1, 1, 2, 2]"]),
        (Op::AveragePool(pool(2, 2, 0, false)), vec!["f32[1,8,7,7]"], vec!["[1, 8, 3, 3]"]),
        (Op::GlobalAveragePool, vec!["f32[N,C,7,7]"], vec!["[N, C, 1, 1]"]),
        (
            Op::BatchNormalization { epsilon: 1e-5 },
            vec!["f32[N,8,4,4]", "f32[8]", "f32[8]", "f32[8]", "f32[8]"],
            vec!["[N, 8, 4, 4]"],
        ),
        (
            Op::Lrn { size: 5, alpha: 1e-4, beta: 0.75, bias: 1.0 },
            vec!["f32[1,96,55,55]"],
            vec!["[1, 96, 55, 55]"],
        ),
        (Op::Softmax { axis: -1 }, vec!["f32[B,S,S]"], vec!["[B, S, S]"]),
        (reduce(&[-1], true), vec!["f32[B,S,768]"], vec!["[B, S, 1]"]),
        (reduce(&[0, 2], false), vec!["f32[2,3,4]"], vec!["[3]"]),
        (
            Op::ArgReduce { max: true, axis: 1, keepdims: false, select_last_index: false },
            vec!["f32[2,5,3]"],
            vec!["[2, 3]"],
        ),
        (Op::Reshape { allowzero: false }, vec!["f32[2,3,4]", "=0,-1"], vec!["[2, 12]"]),
        (Op::Reshape { allowzero: false }, vec!["f32[N,3,4]", "=0,12"], vec!["[N, 12]"]),
        (Op::Transpose { perm: Some(vec![0, 2, 1]) }, vec!["f32[B,S,H]"], vec!["[B, H, S]"]),
        (Op::Transpose { perm: None }, vec!["f32[2,3,4]"], vec!["[4, 3, 2]"]),
        (Op::Concat { axis: 1 }, vec!["f32[N,2,5]", "f32[N,3,5]"], vec!["[N, 5, 5]"]),
        (Op::Gather { axis: 0 }, vec!["f32[10,4]", "i64[3,2]"], vec!["[3, 2, 4]"]),
        (Op::Gather { axis: 1 }, vec!["f32[2,10,4]", "#3"], vec!["[2, 4]"]),
        (Op::Unsqueeze { axes: vec![0, 3] }, vec!["f32[2,3]"], vec!["[1, 2, 3, 1]"]),
        (Op::Squeeze { axes: Some(vec![1]) }, vec!["f32[2,1,3]"], vec!["[2, 3]"]),
        (Op::Squeeze { axes: None }, vec!["f32[1,2,1,3]"], vec!["[2, 3]"]),
        (Op::Flatten { axis: 1 }, vec!["f32[2,3,4,5]"], vec!["[2, 60]"]),
        (Op::Flatten { axis: 0 }, vec!["f32[2,3]"], vec!["[1, 6]"]),
        (Op::Expand, vec!["f32[3,1]", "=2,1,4"], vec!["[2, 3, 4]"]),
        (Op::Slice, vec!["f32[10,20]", "=2,0", "=8,-1", "=0,1", "=2,1"], vec!["[3, 19]"]),
        (Op::Slice, vec!["f32[10]", "=-1", "=-11", "=0", "=-1"], vec!["[10]"]),
        (Op::Shape { start: 0, end: None }, vec!["f32[N,3]"], vec!["[2]"]),
        (Op::Shape { start: -1, end: None }, vec!["f32[N,3,5]"], vec!["[1]"]),
        (
            Op::Split { axis: 1, splits: Some(vec![2, 3]) },
            vec!["f32[4,5]"],
            vec!["[4, 2]", "[4, 3]"],
        ),
        (Op::Split { axis: 0, splits: None }, vec!["f32[6,2]"], vec!["[3, 2]", "[3, 2]"]),
        (
            Op::Pad { mode: PadMode::Constant, pads: vec![0, 1, 0, 1], value: 0.0 },
            vec!["f32[3,4]"],
            vec!["[3, 6]"],
        ),
        (Op::Tile, vec!["f32[2,3]", "=2,2"], vec!["[4, 6]"]),
        (Op::Where, vec!["bool[N,1]", "f32[1,4]", "f32[1]"], vec!["[N, 4]"]),
        (Op::ConstantOfShape(HostTensor::from_f32(vec![], &[0.0])), vec!["=2,3"], vec!["[2, 3]"]),
        (Op::Range, vec!["#0", "#10", "#3"], vec!["[4]"]),
        (Op::DepthToSpace { blocksize: 2, crd: false }, vec!["f32[1,8,3,3]"], vec!["[1, 2, 6, 6]"]),
        (Op::SpaceToDepth { blocksize: 2 }, vec!["f32[1,2,6,6]"], vec!["[1, 8, 3, 3]"]),
        (Op::Dropout, vec!["f32[2,3]"], vec!["[2, 3]", "[2, 3]"]),
    ];
    for (op, ins, want) in cases {
        let name = format!("{op:?} on {ins:?}");
        let mut g = common::single(op, &ins, want.len());
        propagate(&mut g, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<String> =
            g.outputs.iter().map(|&o| shape_str(g.value(o).shape.as_ref().unwrap())).collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn dtype_inference() {
    let cases: Vec<(Op, Vec<&str>, DType)> = vec![
        (Op::Binary(BinaryOp::Equal), vec!["f32[2]", "f32[2]"], DType::Bool),
        (Op::Cast { to: DType::F16 }, vec!["f32[2]"], DType::F16),
        (Op::Shape { start: 0, end: None }, vec!["f32[2]"], DType::I64),
        (
            Op::ArgReduce { max: false, axis: 0, keepdims: true, select_last_index: false },
            vec!["f32[2]"],
            DType::I64,
        ),
        (Op::Where, vec!["bool[2]", "f16[2]", "f16[2]"], DType::F16),
        (Op::ConstantOfShape(HostTensor::from_i64(vec![], &[1])), vec!["=2"], DType::I64),
    ];
    for (op, ins, want) in cases {
        let mut g = common::single(op.clone(), &ins, 1);
        propagate(&mut g, false).unwrap();
        assert_eq!(g.value(g.outputs[0]).dtype, want, "{op:?}");
    }
}

#[test]
fn inference_errors_name_the_node_and_op() {
    let cases: Vec<(Op, Vec<&str>, &str)> = vec![
        (
            Op::Binary(BinaryOp::Add),
            vec!["f32[2,3]", "f32[4,3]"],
            "[Add n] shapes [2, 3] and [4, 3] do not broadcast",
        ),
        (Op::MatMul, vec!["f32[2,3]", "f32[4,5]"], "[MatMul n] cannot multiply [2, 3] by [4, 5]"),
        (
            conv(3, 1, 0, 1, 1, AutoPad::NotSet),
            vec!["f32[1,4,8,8]", "f32[8,3,3,3]"],
            "[Conv n] input has 4 channels",
        ),
        (Op::Reshape { allowzero: false }, vec!["f32[2,3]", "=4,2"], "[Reshape n] cannot reshape"),
        (Op::Transpose { perm: Some(vec![0, 0]) }, vec!["f32[2,3]"], "[Transpose n] perm [0, 0]"),
        (Op::Concat { axis: 3 }, vec!["f32[2,3]"], "[Concat n] axis 3 is out of range"),
    ];
    for (op, ins, want) in cases {
        let mut g = common::single(op, &ins, 1);
        let err = propagate(&mut g, false).unwrap_err().to_string();
        assert!(err.starts_with(want), "got {err:?}, want prefix {want:?}");
    }
}
