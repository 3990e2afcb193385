//! The `precision` session option (issue 23): `Session::load_with_precision` and friends apply
//! `mpsrt_graph::passes::precision::convert_to_f16` to the imported graph before it is
//! compiled, so an f32 model runs its heavy ops in f16 with its inputs and outputs still f32.
//! Kept beside `Session` (not in `SessionOptions`) so the session's own code is unchanged:
//! the rewrite is a graph-to-graph step in front of `Session::from_graph`.

use crate::session::{Session, SessionOptions};
use mpsrt_core::{Place, Result};
use mpsrt_graph::passes::precision::{convert_to_f16, F16Report};
use mpsrt_graph::Graph;
use std::path::Path;

pub use mpsrt_graph::passes::precision::Precision;

/// Rewrites `graph` for `precision` (nothing for `F32`). Runs the same inference and folding
/// `CompiledGraph::new` does first, so BatchNorm folds into f32 weights before they are cast
/// and dtypes are known; compiling the result repeats them at no cost.
pub fn apply_precision(graph: &mut Graph, precision: Precision) -> Result<Option<F16Report>> {
    if precision == Precision::F32 {
        return Ok(None);
    }
    use mpsrt_graph::passes::{affine, dce, fold_bn, simplify};
    graph.validate()?;
    mpsrt_graph::propagate(graph, true)?;
    simplify::remove_identities(graph);
    fold_bn::fold_batchnorm_into_conv(graph);
    fold_bn::batchnorm_to_affine(graph);
    affine::fold_affine(graph);
    dce::eliminate_dead_nodes(graph);
    let report = convert_to_f16(graph)?;
    mpsrt_graph::propagate(graph, true)?;
    Ok(Some(report))
}

impl Session {
    /// [`Session::load`] with a [`Precision`].
    pub fn load_with_precision(
        path: impl AsRef<Path>,
        place: Place,
        options: SessionOptions,
        precision: Precision,
    ) -> Result<Session> {
        let model = mpsrt_onnx::load_path(path)?;
        Self::from_graph_with_precision(model.graph, place, options, precision)
    }

    /// [`Session::load_bytes`] with a [`Precision`].
    pub fn load_bytes_with_precision(
        bytes: &[u8],
        place: Place,
        options: SessionOptions,
        precision: Precision,
    ) -> Result<Session> {
        let model = mpsrt_onnx::load_bytes(bytes)?;
        Self::from_graph_with_precision(model.graph, place, options, precision)
    }

    /// [`Session::from_graph`] after [`apply_precision`].
    pub fn from_graph_with_precision(
        mut graph: Graph,
        place: Place,
        options: SessionOptions,
        precision: Precision,
    ) -> Result<Session> {
        apply_precision(&mut graph, precision)?;
        Self::from_graph(graph, place, options)
    }
}
