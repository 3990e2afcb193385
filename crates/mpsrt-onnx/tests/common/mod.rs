//! Builders for small ONNX models made directly from the prost types, so tests need neither
//! Python nor committed binary fixtures.

#![allow(dead_code)]

use mpsrt_onnx::proto::attribute_proto::AttributeType;
use mpsrt_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use mpsrt_onnx::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

pub const FLOAT: i32 = 1;
pub const INT64: i32 = 7;
pub const BOOL: i32 = 9;

/// A tensor value info; dims that parse as integers are fixed, others symbolic.
pub fn vi(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(v) => dimension::Value::DimValue(v),
                Err(_) => dimension::Value::DimParam(d.to_string()),
            }),
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

pub fn node(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_0")),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

pub fn ai(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}

pub fn af(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}

pub fn ais(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}

pub fn astr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

pub fn at(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        t: Some(t),
        r#type: Some(AttributeType::Tensor as i32),
        ..Default::default()
    }
}

pub fn tf32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

pub fn ti64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT64),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

pub fn raw(name: &str, elem: i32, dims: &[i64], bytes: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(elem),
        raw_data: Some(bytes),
        ..Default::default()
    }
}

pub fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    inits: Vec<TensorProto>,
) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("mpsrt-tests".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs
                .iter()
                .map(|o| ValueInfoProto { name: Some(o.to_string()), ..Default::default() })
                .collect(),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn bytes(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}

/// A small but realistic model (conv + bn + relu + pool + shape-chain reshape + gemm + softmax)
/// used by the fuzz tests.
pub fn small_cnn() -> ModelProto {
    let nodes = vec![
        node(
            "Conv",
            &["x", "w", "b"],
            &["c"],
            vec![ais("kernel_shape", &[3, 3]), ais("pads", &[1, 1, 1, 1])],
        ),
        node("BatchNormalization", &["c", "s", "bb", "m", "v"], &["bn"], vec![af("epsilon", 1e-5)]),
        node("Relu", &["bn"], &["r"], vec![]),
        node(
            "MaxPool",
            &["r"],
            &["p"],
            vec![ais("kernel_shape", &[2, 2]), ais("strides", &[2, 2])],
        ),
        node("Shape", &["p"], &["sh"], vec![]),
        node("Gather", &["sh", "zero"], &["n"], vec![ai("axis", 0)]),
        node("Unsqueeze", &["n", "axes0"], &["n1"], vec![]),
        node("Concat", &["n1", "minus1"], &["target"], vec![ai("axis", 0)]),
        node("Reshape", &["p", "target"], &["flat"], vec![]),
        node("Gemm", &["flat", "fw", "fb"], &["logits"], vec![ai("transB", 1)]),
        node("Softmax", &["logits"], &["y"], vec![ai("axis", -1)]),
    ];
    let inits = vec![
        tf32("w", &[4, 2, 3, 3], &[0.1; 72]),
        tf32("b", &[4], &[0.0; 4]),
        tf32("s", &[4], &[1.0; 4]),
        tf32("bb", &[4], &[0.0; 4]),
        tf32("m", &[4], &[0.0; 4]),
        tf32("v", &[4], &[1.0; 4]),
        ti64("zero", &[], &[0]),
        ti64("axes0", &[1], &[0]),
        ti64("minus1", &[1], &[-1]),
        tf32("fw", &[3, 64], &[0.01; 192]),
        tf32("fb", &[3], &[0.0; 3]),
    ];
    model(13, nodes, vec![vi("x", FLOAT, &["N", "2", "8", "8"])], &["y"], inits)
}
