//! Graph IR of mpsrt, independent of any file format: values with symbolic shapes, nodes with a
//! typed op vocabulary, shape/dtype inference, constant folding of shape subgraphs, dead-node and
//! identity elimination, elementwise-fusion and epilogue analyses, and a liveness-based memory
//! planner producing execution plans cached per input shapes.
//!
//! How an executor runs a model:
//! 1. Build a [`CompiledGraph`] once (infers symbolic shapes, folds, removes dead/identity nodes).
//! 2. Per request, call [`CompiledGraph::plan`] with the concrete input shapes (in
//!    `graph().inputs` order). If [`CompiledGraph::value_inputs`] is non-empty (a Reshape target,
//!    Slice bounds or Reduce axes fed as graph inputs), call
//!    [`CompiledGraph::plan_with_values`] with those inputs' host values instead.
//! 3. On the first run of a plan, execute `plan.init_steps` (nodes depending only on constants,
//!    e.g. weights built by `ConstantOfShape`) and keep their outputs (`Storage::Persistent`).
//! 4. Walk `plan.steps` in order, recording into one submission. `Step::Node(i)` runs
//!    `plan.graph.nodes[i]`; `Step::Fused(group)` runs one generated kernel over `group.nodes`;
//!    `Step::Epilogue { anchor, add, activation }` runs a Conv/Gemm with a residual `Add`
//!    (Conv only) and/or the following Relu/LeakyRelu/Clip applied in its kernel's epilogue.
//!    [`Plan::step_io`] gives the values read and written; `plan.storage[value.0]` says where each
//!    lives: the caller's input, a constant (`plan.graph.initializers`), a graph-output buffer, a
//!    persistent buffer, or a reusable slot of `plan.slot_bytes[slot]` bytes. A step's outputs
//!    never share a slot with its inputs.
//!
//! Ops in a plan are canonical: parameter inputs (axes, pads, split sizes, Clip bounds, Resize
//! scales, CastLike targets) have been folded into attributes, so every op's inputs are data.
//! `plan.memory` reports slot bytes with and without reuse; `plan.epilogues` lists conv/matmul
//! nodes whose bias add/activation a kernel could absorb (activations on Conv/Gemm are
//! absorbed; bias adds are analysis only).

pub mod attention;
pub mod canon;
pub mod einsum;
pub mod eval;
pub mod infer;
pub mod infer_shape;
pub mod ir;
pub mod op;
pub mod passes;
pub mod plan;
pub mod propagate;
pub mod resize;

pub use attention::AttentionAttrs;
pub use ir::{
    concrete, dims, shape_str, Declared, Dim, ElemType, Graph, HostTensor, Node, Signature,
    ValueId, ValueInfo,
};
pub use op::{
    AutoPad, BinaryOp, ConvAttrs, ConvTransposeAttrs, CoordTransform, KeepAspect, NearestRounding,
    Op, PadMode, PoolAttrs, ReduceKind, ResizeAttrs, ResizeMode, UnaryOp,
};
pub use passes::fusion::{Epilogue, FusedElementwise};
pub use plan::{
    assign_slots, compile, Assignment, CompiledGraph, Lifetime, MemoryStats, Plan, PlanCache,
    PlanOptions, Step, Storage,
};
pub use propagate::{propagate, specialize, specialize_with_values, value_inputs, FOLD_LIMIT};
pub use resize::ResizeAxis;
