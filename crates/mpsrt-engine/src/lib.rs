//! The mpsrt inference engine: runs ONNX models on the eager tensor library.
//!
//! [`Session::load`] imports the model (`mpsrt-onnx`), refuses it up front if any op has no
//! mapping (listing each with its count), and compiles it once (`mpsrt-graph`). Each
//! [`Session::run`] specializes the graph to the concrete input shapes through the plan cache,
//! runs the plan's init steps once per plan, then walks its steps: one table entry per op
//! (`elementwise`, `shape`, `nn`, `reduce` modules), one generated kernel per fused elementwise
//! group, and values dropped right after their last use. [`triton`] plugs the engine into
//! `mpsrt serve`.
//!
//! ```no_run
//! use mpsrt_engine::{Session, SessionOptions};
//! use mpsrt_core::Place;
//! let s = Session::load("model.onnx", Place::Gpu(0), SessionOptions::default())?;
//! let x = mpsrt_tensor::zeros(&[1, 3, 224, 224], mpsrt_core::DType::F32, Place::Gpu(0))?;
//! let feeds = [(s.inputs()[0].name.clone(), x)].into_iter().collect();
//! for (name, t) in s.run(&feeds)? { println!("{name}: {:?}", t.shape()); }
//! # Ok::<(), mpsrt_core::Error>(())
//! ```

mod attention;
mod concat_inplace;
pub mod conformance;
mod dw_pool;
mod einsum;
mod elementwise;
mod gate_fold;
pub mod generate;
mod index;
mod loss;
mod nn;
mod norm;
mod ops;
mod pool;
mod precision;
mod quant;
mod reduce;
mod replay;
mod resize;
mod scatter;
mod select;
mod session;
mod shape;
mod step;
pub mod triton;
pub mod value;

pub use ops::supported_ops;
pub use precision::{apply_precision, Precision};
pub use session::{tensor_from_host, IoInfo, Session, SessionOptions, StepProfile};
