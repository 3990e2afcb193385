//! The registered kernels: each body reads Paddle's arguments through [`Call`] and runs the
//! mpsrt-tensor op that the rest of mpsrt uses. Signatures follow Paddle 3.3's
//! `paddle/phi/kernels/*_kernel.h` exactly (the variadic entry point depends on it).

use super::{kernel, vty, Call, KernelDef, Pending};
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_tensor::{self as mt, Tensor};
use std::ffi::c_void;

const F: &[DType] = &[DType::F32, DType::F16];
const FI: &[DType] = &[DType::F32, DType::F16, DType::I32];
/// With int64 (run on the host, see [`wide`]).
const FIL: &[DType] = &[DType::F32, DType::F16, DType::I32, DType::I64];
const FIB: &[DType] = &[DType::F32, DType::F16, DType::I32, DType::Bool];
const FIBL: &[DType] = &[DType::F32, DType::F16, DType::I32, DType::Bool, DType::I64];
/// Every dtype Paddle can hold on the device (raw copies work for all of them).
const ALL: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::I32,
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I64,
    DType::F64,
];

/// An 8-byte element view reinterpreted as int32 pairs (WGSL has no 64-bit types; moving bytes
/// does not need them).
pub(super) fn as_words(t: &Tensor) -> Result<Tensor> {
    let l = t.layout();
    let mut shape = l.shape.clone();
    shape.push(2);
    let mut strides: Vec<isize> = l.strides.iter().map(|s| s * 2).collect();
    strides.push(1);
    let layout = Layout { shape, strides, offset: l.offset * 2 };
    Tensor::from_storage(t.storage().clone(), layout, DType::I32)
}

/// `contiguous(input) -> out`: the dense copy of a strided view (no CPU fallback exists).
fn contiguous(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    if x.numel() == 0 {
        return c.store(0, &x);
    }
    if x.dtype().size() == 8 {
        let dense = as_words(&x)?.contiguous()?;
        return c.store_raw(0, &dense);
    }
    c.store(0, &x.contiguous()?)
}

/// `strided_copy(input, dims, out_stride, offset) -> out`: `out` becomes a view with those
/// strides and byte offset, and receives `input`'s values. Dense destinations only for now.
fn strided_copy(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let (dims, strides, offset) = (c.ints(0), c.ints(1), c.int(2));
    let shape: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
    let dense = Layout::contiguous(&shape).strides;
    let is_dense = shape
        .iter()
        .zip(strides.iter().zip(&dense))
        .all(|(&d, (&s, &w))| d <= 1 || s as isize == w);
    if !is_dense || strides.len() != shape.len() {
        return Err(Error::unsupported(
            c.name,
            format!("copy into a non-contiguous view (dims {dims:?}, strides {strides:?}) is not supported on mps yet"),
        ));
    }
    let t = if x.dtype().size() == 8 { as_words(&x)?.contiguous()? } else { x.contiguous()? };
    c.pending.borrow_mut().push(Pending::Strided { out: 0, tensor: t, dims, strides, offset });
    Ok(())
}

/// `transpose(x, perm)`: the permuted view made dense.
fn transpose(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let perm: Vec<isize> = c.ints(0).iter().map(|&a| a as isize).collect();
    if x.dtype().size() == 8 {
        let mut p = perm.clone();
        p.push(x.ndim() as isize);
        return c.store_raw(0, &as_words(&x)?.permute(&p)?.contiguous()?);
    }
    c.store(0, &x.permute(&perm)?.contiguous()?)
}

fn assign(c: &Call) -> Result<()> {
    contiguous(c)
}

/// Store a result computed on the host (mpsrt's CPU backend): 8-byte types, which WGSL has
/// no arithmetic for, are moved as int32 pairs.
pub(super) fn store_host(c: &Call, i: usize, host: &Tensor) -> Result<()> {
    if host.dtype().gpu_supported() {
        return c.store(i, &host.to(place())?);
    }
    let words = Tensor::from_bytes(&host.to_bytes()?, DType::I32, &[host.numel() * 2], place())?;
    c.store_raw(i, &words)
}

/// int64 / float64 operands (Python ints become int64 tensors, e.g. labels and masks in
/// `cross_entropy`): WGSL has no 64-bit types, so these few small ops read their operands
/// back and run on mpsrt's CPU backend; the result goes back to the device.
fn wide(t: &Tensor) -> bool {
    !t.dtype().gpu_supported()
}

macro_rules! binary {
    ($($f:ident => $op:path;)*) => {$(
        fn $f(c: &Call) -> Result<()> {
            let (x, y) = (c.input(0)?, c.input(1)?);
            if wide(&x) || wide(&y) {
                let cpu = mpsrt_core::Place::Cpu;
                return store_host(c, 0, &$op(&x.to(cpu)?, &y.to(cpu)?)?);
            }
            c.store(0, &$op(&x, &y)?)
        }
    )*};
}
binary! {
    add => mt::add; subtract => mt::subtract; multiply => mt::multiply; divide => mt::divide;
    maximum => mt::maximum; minimum => mt::minimum;
    equal => mt::equal; not_equal => mt::not_equal; less_than => mt::less; less_equal => mt::less_equal;
    greater_than => mt::greater; greater_equal => mt::greater_equal;
}

macro_rules! unary {
    ($($f:ident => $op:path;)*) => {$(
        fn $f(c: &Call) -> Result<()> {
            c.store(0, &$op(&c.input(0)?)?)
        }
    )*};
}
unary! {
    abs => mt::abs; exp => mt::exp; log => mt::log; sqrt => mt::sqrt; relu => mt::relu;
    sigmoid => mt::sigmoid; tanh => mt::tanh; silu => mt::silu; hardswish => mt::hardswish;
    negative => mt::neg; floor => mt::floor; ceil => mt::ceil; reciprocal => mt::reciprocal;
}

fn gelu(c: &Call) -> Result<()> {
    c.store(0, &mt::gelu(&c.input(0)?, c.bool(0))?)
}
fn leaky_relu(c: &Call) -> Result<()> {
    c.store(0, &mt::leaky_relu(&c.input(0)?, c.float(0))?)
}
fn clip(c: &Call) -> Result<()> {
    c.store(0, &mt::clip(&c.input(0)?, Some(c.float(0)), Some(c.float(1)))?)
}
fn where_(c: &Call) -> Result<()> {
    c.store(0, &mt::where_(&c.input(0)?, &c.input(1)?, &c.input(2)?)?)
}

fn place() -> mpsrt_core::Place {
    mpsrt_core::Place::Gpu(mpsrt_runtime::current_device())
}

fn full_of(c: &Call, value: mt::Scalar) -> Result<()> {
    let (shape, dt) = (c.out_shape(0)?, c.out_dtype(0)?);
    if !dt.gpu_supported() {
        return store_host(c, 0, &mt::full(&shape, value, dt, mpsrt_core::Place::Cpu)?);
    }
    c.store(0, &mt::full(&shape, value, dt, place())?)
}
fn full(c: &Call) -> Result<()> {
    full_of(c, c.scalar(1))
}
fn full_like(c: &Call) -> Result<()> {
    full_of(c, c.scalar(0))
}

/// `gaussian(shape, mean, std, seed, dtype)`: mpsrt's generator (a non-zero seed reseeds it).
fn gaussian(c: &Call) -> Result<()> {
    let (shape, dt) = (c.out_shape(0)?, c.out_dtype(0)?);
    // Attributes: shape, mean, std, seed, dtype.
    if c.int(3) != 0 {
        mt::manual_seed(c.int(3) as u64);
    }
    let z = mt::randn(&shape, DType::F32, place())?;
    c.store(0, &mt::add_scalar(&mt::multiply_scalar(&z, c.float(2))?, c.float(1))?.astype(dt)?)
}

/// `uniform(shape, dtype, min, max, seed)`.
fn uniform(c: &Call) -> Result<()> {
    let (shape, dt) = (c.out_shape(0)?, c.out_dtype(0)?);
    // Attributes: shape, dtype, min, max, seed.
    if c.int(4) != 0 {
        mt::manual_seed(c.int(4) as u64);
    }
    let (lo, hi) = (c.float(2), c.float(3));
    let u = mt::rand(&shape, DType::F32, place())?;
    c.store(0, &mt::add_scalar(&mt::multiply_scalar(&u, hi - lo)?, lo)?.astype(dt)?)
}

/// `randint(low, high, shape, dtype)`: uniform integers in `[low, high)` from mpsrt's
/// generator (int64 results are written as int32 pairs).
fn randint(c: &Call) -> Result<()> {
    let (shape, dt) = (c.out_shape(0)?, c.out_dtype(0)?);
    let (lo, hi) = (c.int(0), c.int(1));
    if hi <= lo {
        return Err(Error::invalid(c.name, format!("low {lo} must be below high {hi}")));
    }
    let cpu = mpsrt_core::Place::Cpu;
    let u = mt::rand(&shape, DType::F32, cpu)?.astype(DType::F64)?;
    // floor(lo + u·(hi - lo)), clamped: u < 1, but float rounding may reach the top.
    let v = mt::floor(&mt::add_scalar(&mt::multiply_scalar(&u, (hi - lo) as f64)?, lo as f64)?)?;
    let v = mt::clip(&v, Some(lo as f64), Some((hi - 1) as f64))?;
    store_host(c, 0, &v.astype(dt)?)
}

fn scale(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let (s, b, after) = (c.scalar(0), c.scalar(1), c.bool(2));
    let r = if after {
        mt::add_scalar(&mt::multiply_scalar(&x, s)?, b)?
    } else {
        mt::multiply_scalar(&mt::add_scalar(&x, b)?, s)?
    };
    c.store(0, &r)
}

/// `cast`: on the device between the types WGSL has; to int64 / float64 (no 64-bit types on
/// the GPU) the values are converted on the host and written back.
fn cast(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let want = match c.dtype(0) {
        Some(d) => d,
        None => c.out_dtype(0)?,
    };
    if want.gpu_supported() && !wide(&x) {
        return c.store(0, &x.astype(want)?);
    }
    store_host(c, 0, &x.to(mpsrt_core::Place::Cpu)?.astype(want)?)
}

fn matmul(c: &Call) -> Result<()> {
    let (mut x, mut y) = (c.input(0)?, c.input(1)?);
    if c.bool(0) && x.ndim() >= 2 {
        x = x.transpose(-1, -2)?;
    }
    if c.bool(1) && y.ndim() >= 2 {
        y = y.transpose(-1, -2)?;
    }
    c.store(0, &mt::matmul(&x, &y)?)
}

fn softmax(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    if x.ndim() == 0 {
        return c.store(0, &mt::full(&[], 1.0, x.dtype(), place())?);
    }
    c.store(0, &mt::softmax(&x, c.int(0) as isize)?)
}
fn log_softmax(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    if x.ndim() == 0 {
        return c.store(0, &mt::full(&[], 0.0, x.dtype(), place())?);
    }
    c.store(0, &mt::log_softmax(&x, c.int(0) as isize)?)
}

/// Reduction axes: Paddle's empty list (or every axis) means all.
pub(super) fn axes(x: &Tensor, dims: &[i64]) -> Option<Vec<isize>> {
    if dims.is_empty()
        || dims.len() >= x.ndim() && x.ndim() > 0 && {
            let mut d: Vec<i64> =
                dims.iter().map(|&a| if a < 0 { a + x.ndim() as i64 } else { a }).collect();
            d.sort_unstable();
            d.dedup();
            d.len() == x.ndim()
        }
    {
        None
    } else {
        Some(dims.iter().map(|&d| d as isize).collect())
    }
}

macro_rules! reduction {
    ($($f:ident => $op:path, keep = $keep:literal;)*) => {$(
        fn $f(c: &Call) -> Result<()> {
            let x = c.input(0)?;
            let ax = axes(&x, &c.ints(0));
            let r = if x.ndim() == 0 { x.clone() } else { $op(&x, ax.as_deref(), c.bool($keep))? };
            c.store(0, &r)
        }
    )*};
}
// sum(x, dims, out_dtype, keep_dim); mean/max/min(x, dims, keep_dim)
reduction! {
    sum => mt::sum, keep = 2;
    mean => mt::mean, keep = 1;
    max => mt::max, keep = 1;
    min => mt::min, keep = 1;
}

fn concat(c: &Call) -> Result<()> {
    let xs = c.input_list(0)?;
    let refs: Vec<&Tensor> = xs.iter().filter(|t| t.numel() > 0).collect();
    if refs.is_empty() {
        let (shape, dt) = (c.out_shape(0)?, c.out_dtype(0)?);
        return c.store(0, &mt::empty(&shape, dt, place())?);
    }
    c.store(0, &mt::concat(&refs, c.scalar(0).as_i64() as isize)?)
}

/// Every kernel the plugin registers.
pub fn all() -> Vec<KernelDef> {
    vec![
        kernel!(direct "contiguous", contiguous, ALL, [x: In, out: Out]),
        kernel!(direct "assign", assign, ALL, [x: In, out: Out]),
        kernel!("strided_copy", strided_copy, ALL, [x: In, dims: VecI64, strides: VecI64, offset: I64, out: Out]),
        kernel!("transpose", transpose, ALL, [x: In, axis: VecI32, out: Out]),
        kernel!(direct "add", add, FIL, [x: In, y: In, out: Out]),
        kernel!(direct "subtract", subtract, FIL, [x: In, y: In, out: Out]),
        kernel!(direct "multiply", multiply, FIL, [x: In, y: In, out: Out]),
        kernel!(direct "divide", divide, F, [x: In, y: In, out: Out]),
        kernel!(direct "maximum", maximum, FI, [x: In, y: In, out: Out]),
        kernel!(direct "minimum", minimum, FI, [x: In, y: In, out: Out]),
        kernel!(direct "equal", equal, FIBL, [x: In, y: In, out: Out]),
        kernel!(direct "not_equal", not_equal, FIBL, [x: In, y: In, out: Out]),
        kernel!(direct "less_than", less_than, FI, [x: In, y: In, out: Out]),
        kernel!(direct "less_equal", less_equal, FI, [x: In, y: In, out: Out]),
        kernel!(direct "greater_than", greater_than, FI, [x: In, y: In, out: Out]),
        kernel!(direct "greater_equal", greater_equal, FI, [x: In, y: In, out: Out]),
        kernel!(direct "abs", abs, F, [x: In, out: Out]),
        kernel!(direct "exp", exp, F, [x: In, out: Out]),
        kernel!(direct "log", log, F, [x: In, out: Out]),
        kernel!(direct "sqrt", sqrt, F, [x: In, out: Out]),
        kernel!(direct "relu", relu, F, [x: In, out: Out]),
        kernel!(direct "sigmoid", sigmoid, F, [x: In, out: Out]),
        kernel!(direct "tanh", tanh, F, [x: In, out: Out]),
        kernel!(direct "silu", silu, F, [x: In, out: Out]),
        kernel!(direct "hardswish", hardswish, F, [x: In, out: Out]),
        kernel!(direct "negative", negative, F, [x: In, out: Out]),
        kernel!(direct "floor", floor, F, [x: In, out: Out]),
        kernel!(direct "ceil", ceil, F, [x: In, out: Out]),
        kernel!(direct "reciprocal", reciprocal, F, [x: In, out: Out]),
        kernel!(direct "gelu", gelu, F, [x: In, approximate: Bool, out: Out]),
        kernel!(direct "leaky_relu", leaky_relu, F, [x: In, alpha: F32, out: Out]),
        kernel!(direct "clip", clip, F, [x: In, min: Scalar, max: Scalar, out: Out]),
        kernel!(direct "where", where_, FI, [cond: In, x: In, y: In, out: Out]),
        kernel!(direct "full", full, FIBL, [shape: IntArray, val: Scalar, dtype: DType, out: Out]),
        kernel!(direct "full_like", full_like, FIBL, [x: In, val: Scalar, dtype: DType, out: Out]),
        kernel!("gaussian", gaussian, F, [shape: IntArray, mean: F32, std: F32, seed: I32, dtype: DType, out: Out]),
        kernel!("uniform", uniform, F, [shape: IntArray, dtype: DType, min: Scalar, max: Scalar, seed: I32, out: Out]),
        kernel!("randint", randint, &[DType::I32, DType::I64], [low: I32, high: I32, shape: IntArray, dtype: DType, out: Out]),
        kernel!(direct "scale", scale, F, [x: In, sc: Scalar, bias: Scalar, after: Bool, out: Out]),
        kernel!(direct "cast", cast, FIBL, [x: In, dtype: DType, out: Out]),
        kernel!("matmul", matmul, F, [x: In, y: In, tx: Bool, ty: Bool, out: Out]),
        kernel!("softmax", softmax, F, [x: In, axis: I32, out: Out]),
        kernel!("log_softmax", log_softmax, F, [x: In, axis: I32, out: Out]),
        kernel!("sum", sum, F, [x: In, dims: IntArray, dtype: DType, keep: Bool, out: Out]),
        kernel!("mean", mean, F, [x: In, dims: IntArray, keep: Bool, out: Out]),
        kernel!("max", max, F, [x: In, dims: IntArray, keep: Bool, out: Out]),
        kernel!("min", min, F, [x: In, dims: IntArray, keep: Bool, out: Out]),
        kernel!("concat", concat, FIB, [xs: InList, axis: Scalar, out: Out]),
    ]
}
