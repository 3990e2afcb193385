//! Helpers shared by the engine's integration tests that build small conv graphs by hand
//! (`concat_inplace.rs`, `conv_epilogues.rs`, `gate_fold.rs`): a graph builder with
//! deterministic sine-valued weights, so each test writes only the pattern it checks.
#![allow(dead_code)] // each test crate uses its own subset

use mpsrt_core::{DType, Place};
use mpsrt_graph::{BinaryOp, ConvAttrs, Graph, HostTensor, Op, UnaryOp, ValueId};

/// The GPU place these tests run on (lavapipe in CI).
pub const GPU: Place = Place::Gpu(0);

/// Whether a GPU adapter exists; with `MPSRT_REQUIRE_GPU=1` a missing one fails the test.
pub fn gpu() -> bool {
    let ok = mpsrt_runtime::gpu_available();
    assert!(ok || std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    ok
}

/// A graph under construction: `n` numbers the values, nodes and initializers it adds;
/// initializers are `sin((i + 1)·k)·amp`.
pub struct B {
    pub g: Graph,
    pub n: usize,
    pub amp: f32,
}

impl B {
    pub fn new(amp: f32) -> B {
        B { g: Graph::new(), n: 0, amp }
    }
    pub fn val(&mut self) -> ValueId {
        self.n += 1;
        self.g.add_value(format!("v{}", self.n), DType::F32, None).unwrap()
    }
    pub fn init(&mut self, shape: Vec<usize>, k: f32) -> ValueId {
        self.n += 1;
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * self.amp).collect();
        self.g.add_initializer(format!("c{}", self.n), HostTensor::from_f32(shape, &v)).unwrap()
    }
    pub fn node(&mut self, op: Op, ins: Vec<ValueId>) -> ValueId {
        let o = self.val();
        self.g.add_node(format!("n{}", self.n), op, ins, vec![o]);
        o
    }
    /// A k×k conv (pad k/2) with a bias, `group` groups.
    pub fn conv(&mut self, x: ValueId, cin: usize, cout: usize, k: usize, group: usize) -> ValueId {
        let w = self.init(vec![cout, cin / group, k, k], 0.37 + self.n as f32 * 0.01);
        let b = self.init(vec![cout], 0.9);
        let p = k / 2;
        let attrs = ConvAttrs { group, pads: vec![p, p, p, p], ..Default::default() };
        self.node(Op::Conv(attrs), vec![x, w, b])
    }
    /// SiLU as exporters write it: `x * Sigmoid(x)`.
    pub fn silu(&mut self, x: ValueId) -> ValueId {
        let s = self.node(Op::Unary(UnaryOp::Sigmoid), vec![x]);
        self.node(Op::Binary(BinaryOp::Mul), vec![x, s])
    }
}
