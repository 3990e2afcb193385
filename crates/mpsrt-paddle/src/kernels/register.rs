//! Kernel registration: [`KernelDef`] (a kernel's name, signature, both entry points and
//! dtypes), the `kernel!` macro that writes the two entry points Paddle needs (the
//! `PD_KernelContext` one for static graphs and the variadic one with the C++ signature for
//! eager mode), and [`register_all`], which hands every definition to `PD_RegisterPhiKernel`
//! for backend "mps". Split from `kernels/mod.rs`, which runs the kernels.

use super::Kind;
use crate::abi::arg;
use crate::capi::{self, api};
use mpsrt_core::{DType, Result};
use std::ffi::c_void;

/// A kernel ready to register: name, signature, both entry points and its dtypes.
pub struct KernelDef {
    pub name: &'static str,
    pub kinds: &'static [Kind],
    pub ctx: extern "C-unwind" fn(*mut c_void),
    pub var: *mut c_void,
    pub dtypes: &'static [DType],
}

macro_rules! vty {
    (In) => { *const c_void };
    (OptIn) => { *const c_void };
    (Str) => { *const c_void };
    (InList) => { *const c_void };
    (Out) => { *mut c_void };
    (OutList) => { *const c_void };
    (Bool) => { bool };
    (I32) => { i32 };
    (I64) => { i64 };
    (F32) => { f32 };
    (Scalar) => { *mut c_void };
    (IntArray) => { *mut c_void };
    (DType) => { i32 };
    (VecI64) => { *mut c_void };
    (VecI32) => { *mut c_void };
}

/// `kernel!("add", body, [F32, F16], [x: In, y: In, out: Out])`: both entry points.
/// `kernel!(direct "add", ...)`: a one-output kernel whose output is allocated before the body
/// runs, so its last elementwise launch writes straight into Paddle's memory (see [`run`]).
macro_rules! kernel {
    (direct $name:literal, $body:expr, $dtypes:expr, [$($p:ident : $k:ident),*]) => {
        kernel!(@ true, $name, $body, $dtypes, [$($p : $k),*])
    };
    ($name:literal, $body:expr, $dtypes:expr, [$($p:ident : $k:ident),*]) => {
        kernel!(@ false, $name, $body, $dtypes, [$($p : $k),*])
    };
    (@ $direct:literal, $name:literal, $body:expr, $dtypes:expr, [$($p:ident : $k:ident),*]) => {{
        const KINDS: &[$crate::kernels::Kind] = &[$($crate::kernels::Kind::$k),*];
        extern "C-unwind" fn var(dev: *const c_void, $($p: vty!($k)),*) {
            $crate::kernels::run_var($name, $direct, dev, &[$(($crate::kernels::Kind::$k, $crate::kernels::Raw::from($p))),*], $body)
        }
        extern "C-unwind" fn ctx(k: *mut c_void) {
            $crate::kernels::run_ctx($name, $direct, k, KINDS, $body)
        }
        $crate::kernels::KernelDef { name: $name, kinds: KINDS, ctx, var: var as *mut c_void, dtypes: $dtypes }
    }};
}
pub(crate) use {kernel, vty};

extern "C-unwind" fn args_def(_key: *const c_void, _kernel: *mut c_void) {}

/// Register every kernel for backend "mps". Returns how many (name, dtype) pairs.
pub fn register_all() -> Result<usize> {
    let a = api()?;
    let mut n = 0;
    for def in all() {
        let mut ins = vec![];
        let mut attrs = vec![];
        let mut outs = vec![];
        for &k in def.kinds {
            match k {
                Kind::In => ins.push(arg::TENSOR),
                Kind::OptIn => ins.push(arg::OPTIONAL_TENSOR),
                Kind::Str => attrs.push(arg::STRING),
                Kind::InList => ins.push(arg::LIST_TENSOR),
                Kind::Out => outs.push(arg::TENSOR),
                Kind::OutList => outs.push(arg::LIST_TENSOR),
                Kind::Bool => attrs.push(arg::BOOL),
                Kind::I32 => attrs.push(arg::INT32),
                Kind::I64 => attrs.push(arg::INT64),
                Kind::F32 => attrs.push(arg::FLOAT32),
                Kind::Scalar => attrs.push(arg::SCALAR),
                Kind::IntArray => attrs.push(arg::INT_ARRAY),
                Kind::DType => attrs.push(arg::DATA_TYPE),
                Kind::VecI64 => attrs.push(arg::LIST_INT64),
                Kind::VecI32 => attrs.push(arg::LIST_INT32),
            }
        }
        let cname = std::ffi::CString::new(def.name).expect("kernel names have no NUL");
        for &dt in def.dtypes {
            // SAFETY: arrays and strings outlive the call (Paddle copies them).
            unsafe {
                (a.PD_RegisterPhiKernel)(
                    cname.as_ptr(),
                    c"mps".as_ptr(),
                    capi::dtype_to_pd(dt),
                    0,
                    ins.len(),
                    ins.as_ptr(),
                    attrs.len(),
                    attrs.as_ptr(),
                    outs.len(),
                    outs.as_ptr(),
                    args_def,
                    def.ctx,
                    def.var,
                );
            }
            n += 1;
        }
    }
    Ok(n)
}

fn all() -> Vec<KernelDef> {
    let mut v = super::ops::all();
    v.extend(super::extra::all());
    v.extend(super::grad::all());
    v.extend(super::nn::all());
    v.extend(super::optim::all());
    v
}

/// Names of the registered kernels with their dtypes (for tests and `mpsrt.paddle`).
pub fn registered() -> Vec<(&'static str, Vec<&'static str>)> {
    all().iter().map(|d| (d.name, d.dtypes.iter().map(|t| t.name()).collect())).collect()
}
