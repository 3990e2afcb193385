//! The importer registry: one table per op family, each mapping ONNX op types to importer
//! functions. Adding an op means adding a row to its family's table.

use crate::ctx::Ctx;
use mpsrt_core::Result;

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod loss;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod scatter;
pub mod select;
pub mod shape;

/// Converts one ONNX node into graph nodes.
pub type Importer = fn(&mut Ctx) -> Result<()>;

/// All family tables, searched in order.
const FAMILIES: &[&[(&str, Importer)]] = &[
    elementwise::OPS,
    conv::OPS,
    pool::OPS,
    norm::OPS,
    reduce::OPS,
    shape::OPS,
    attention::OPS,
    loss::OPS,
    quant::OPS,
    scatter::OPS,
    select::OPS,
];

/// The importer for an ONNX op type (default domain).
pub fn lookup(op_type: &str) -> Option<Importer> {
    FAMILIES.iter().flat_map(|f| f.iter()).find(|(name, _)| *name == op_type).map(|(_, f)| *f)
}

/// Every supported op type, sorted (for documentation and conformance reports).
pub fn supported_ops() -> Vec<&'static str> {
    let mut v: Vec<&str> = FAMILIES.iter().flat_map(|f| f.iter().map(|(n, _)| *n)).collect();
    v.sort_unstable();
    v
}
