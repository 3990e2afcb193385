//! CPU reference for elementwise expressions: evaluates the tree node by node over whole
//! columns (one tight loop per node), reading every input through its broadcast layout.
//! Floats compute in f32 (f64 if any operand is f64), ints in i32 (i64 if any operand is i64);
//! narrow stores wrap like the GPU's packed stores.

use super::math;
use crate::{Scalar, Tensor};
use half::f16;
use mpsrt_core::{numel, DType, Layout, Result};
use mpsrt_kernels::{coalesce, BinaryFn, Expr, UnaryFn, VType};
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::Arc;

/// A column of computed values.
pub(super) enum Col {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    B(Vec<bool>),
}

struct Ctx<'a> {
    inputs: &'a [&'a Tensor],
    shape: &'a [usize],
    scalars: &'a [Scalar],
    wide_f: bool,
    wide_i: bool,
    n: usize,
    /// Inputs already gathered to `shape` and the element range this context evaluates.
    pre: Option<(&'a [Src<'a>], usize)>,
}

/// A chunked evaluation's input: gathered once, or (f32 already in the compute type) read
/// straight from the tensor's buffer a chunk at a time — contiguous, or through its coalesced
/// broadcast layout (per-channel parameters: each chunk fills its own runs, so the expansion
/// happens on the worker threads, in cache, instead of as a full-size pass up front).
pub(super) enum Src<'a> {
    Col(Col),
    F32(&'a [f32]),
    F32Strided(&'a [f32], Strided),
}

/// A broadcast layout with its dims coalesced: `shape`/`strides` over elements from `offset`.
pub(super) struct Strided {
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
}

impl Strided {
    /// Elements `lo..hi` (row-major over `shape`) of `data`, a whole innermost run at a time.
    fn gather(&self, data: &[f32], lo: usize, hi: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(hi - lo);
        self.gather_into(data, lo, hi, &mut out);
        out
    }

    /// The length of the runs over which this input is constant (its innermost coalesced dim,
    /// when that is broadcast: `HW` for a per-channel `[C, 1, 1]` parameter of an NCHW map),
    /// `None` when consecutive elements differ. Always a product of trailing output dims, so
    /// the runs of several inputs nest (the shortest divides the others).
    pub(super) fn run(&self) -> Option<usize> {
        match (self.shape.last(), self.strides.last()) {
            (Some(&n), Some(0)) => Some(n),
            (None, _) => Some(usize::MAX),
            _ => None,
        }
    }

    /// The dims above the innermost one, and their strides (what selects a run).
    pub(super) fn outer(&self) -> (&[usize], &[isize]) {
        let n = self.shape.len().saturating_sub(1);
        (&self.shape[..n], &self.strides[..n])
    }

    /// The element offset of element 0.
    pub(super) fn offset(&self) -> usize {
        self.offset
    }

    /// The value of element `i` (row-major over `shape`).
    pub(super) fn at(&self, data: &[f32], i: usize) -> f32 {
        let (mut r, mut off) = (i, self.offset as isize);
        for d in (0..self.shape.len()).rev() {
            off += (r % self.shape[d]) as isize * self.strides[d];
            r /= self.shape[d];
        }
        data[off as usize]
    }

    /// [`Self::gather`] appended to `out` (empty on entry), reusing its allocation.
    pub(super) fn gather_into(&self, data: &[f32], lo: usize, hi: usize, out: &mut Vec<f32>) {
        let nd = self.shape.len();
        if nd == 0 {
            out.resize(hi - lo, data[self.offset]);
            return;
        }
        let (last, step) = (self.shape[nd - 1], self.strides[nd - 1]);
        let (mut row, mut j) = (lo / last, lo % last);
        while out.len() < hi - lo {
            // Offset of this row's first element: the row index spread over the outer dims.
            let (mut r, mut base) = (row, self.offset as isize);
            for d in (0..nd - 1).rev() {
                base += (r % self.shape[d]) as isize * self.strides[d];
                r /= self.shape[d];
            }
            let take = (last - j).min(hi - lo - out.len());
            let start = base + j as isize * step;
            match step {
                0 => out.resize(out.len() + take, data[start as usize]),
                1 => out.extend_from_slice(&data[start as usize..start as usize + take]),
                s => out.extend((0..take).map(|t| data[(start + t as isize * s) as usize])),
            }
            row += 1;
            j = 0;
        }
    }
}

/// Elements per evaluation chunk: a chunk's per-node columns stay in cache.
const CHUNK: usize = 16384;

impl Col {
    fn slice(&self, lo: usize, hi: usize) -> Col {
        match self {
            Col::F32(v) => Col::F32(v[lo..hi].to_vec()),
            Col::F64(v) => Col::F64(v[lo..hi].to_vec()),
            Col::I32(v) => Col::I32(v[lo..hi].to_vec()),
            Col::I64(v) => Col::I64(v[lo..hi].to_vec()),
            Col::B(v) => Col::B(v[lo..hi].to_vec()),
        }
    }
}

pub(crate) fn eval(
    inputs: &[&Tensor],
    shape: &[usize],
    out: DType,
    expr: &Expr,
    scalars: &[Scalar],
) -> Result<Tensor> {
    let any = |d: DType| inputs.iter().any(|t| t.dtype() == d) || out == d;
    let ctx = Ctx {
        inputs,
        shape,
        scalars,
        wide_f: any(DType::F64),
        wide_i: any(DType::I64),
        n: numel(shape),
        pre: None,
    };
    // Every byte is stored below (each column holds n values), so no zero fill is needed.
    let mut buf = CpuBuffer::for_overwrite(
        "elementwise",
        mpsrt_core::checked_nbytes("elementwise", shape, out.size())?,
    )?;
    if out == DType::F32 && !ctx.wide_f {
        let pre = inputs.iter().map(|t| ctx.source(t)).collect::<Result<Vec<Src>>>()?;
        if super::elementwise_f32::supported(expr, &pre) {
            let dst = &mut buf.as_mut_slice::<f32>()[..ctx.n];
            super::par_chunks(dst, CHUNK, |k, d| {
                super::elementwise_f32::eval_chunk(expr, &pre, scalars, k * CHUNK, d)
            });
            let storage = Storage::Cpu(Arc::new(buf));
            return Ok(Tensor::from_parts(storage, Layout::contiguous(shape), out));
        }
    }
    if ctx.n <= CHUNK {
        store_into(&ctx.eval(expr)?, out, buf.bytes_mut());
    } else {
        // Gather every input once, then evaluate the tree chunk by chunk (its intermediate
        // columns stay in cache instead of each costing a full pass over memory) and store
        // each chunk straight into its part of the output, chunks spread over the worker pool.
        let pre = inputs.iter().map(|t| ctx.source(t)).collect::<Result<Vec<Src>>>()?;
        let size = out.size();
        let bytes = &mut buf.bytes_mut()[..ctx.n * size];
        let (ctx, pre) = (&ctx, &pre);
        let results = super::par_chunks(bytes, CHUNK * size, |k, dst| -> Result<()> {
            let c = Ctx { n: dst.len() / size, pre: Some((pre, k * CHUNK)), ..*ctx };
            store_into(&c.eval(expr)?, out, dst);
            Ok(())
        });
        results.into_iter().collect::<Result<Vec<()>>>()?;
    }
    Ok(Tensor::from_parts(Storage::Cpu(Arc::new(buf)), Layout::contiguous(shape), out))
}

fn read_input<T: bytemuck::Pod>(t: &Tensor, shape: &[usize]) -> Result<Vec<T>> {
    let Storage::Cpu(buf) = t.storage() else {
        return Err(mpsrt_core::Error::device(
            "cpu",
            "internal: GPU tensor reached the CPU backend",
        ));
    };
    let data: &[T] = buf.as_slice();
    let layout = t.layout().broadcast_to("broadcast", shape)?;
    Ok(gather(data, &layout))
}

/// The elements of `l` in row-major order, a whole innermost run at a time: a slice copy for
/// contiguous runs, a fill for broadcast ones (per-channel parameters), so the common cases
/// cost a `memcpy` instead of per-element index arithmetic.
fn gather<T: Copy>(data: &[T], l: &Layout) -> Vec<T> {
    let n = numel(&l.shape);
    if n == 0 {
        return Vec::new();
    }
    if l.is_contiguous() {
        return data[l.offset..l.offset + n].to_vec();
    }
    let nd = l.shape.len();
    let (last, step) = (l.shape[nd - 1], l.strides[nd - 1]);
    let mut out = Vec::with_capacity(n);
    for b in l.row_starts().offsets() {
        match step {
            0 => out.extend(std::iter::repeat_n(data[b], last)),
            1 => out.extend_from_slice(&data[b..b + last]),
            s => out.extend((0..last).map(|j| data[(b as isize + j as isize * s) as usize])),
        }
    }
    out
}

impl<'a> Ctx<'a> {
    /// How a chunked evaluation reads `t`: borrowed when contiguous f32 in an f32 tree.
    fn source(&self, t: &'a Tensor) -> Result<Src<'a>> {
        if let (Storage::Cpu(buf), DType::F32, false) = (t.storage(), t.dtype(), self.wide_f) {
            let l = t.layout().broadcast_to("broadcast", self.shape)?;
            let data = buf.as_slice::<f32>();
            if l.is_contiguous() {
                return Ok(Src::F32(&data[l.offset..l.offset + self.n]));
            }
            let (shape, mut strides) = coalesce(&l.shape, std::slice::from_ref(&l.strides));
            let strides = strides.pop().unwrap_or_default();
            return Ok(Src::F32Strided(data, Strided { shape, strides, offset: l.offset }));
        }
        Ok(Src::Col(self.load(t)?))
    }

    fn eval(&self, e: &Expr) -> Result<Col> {
        Ok(match e {
            Expr::Input(i) => match self.pre {
                Some((srcs, lo)) => match &srcs[*i] {
                    Src::Col(c) => c.slice(lo, lo + self.n),
                    Src::F32(v) => Col::F32(v[lo..lo + self.n].to_vec()),
                    Src::F32Strided(v, l) => Col::F32(l.gather(v, lo, lo + self.n)),
                },
                None => self.load(self.inputs[*i])?,
            },
            Expr::Scalar(k, t) => {
                let s = self.scalars.get(*k).copied().unwrap_or(Scalar::I(0));
                match t {
                    VType::Float if self.wide_f => Col::F64(vec![s.as_f64(); self.n]),
                    VType::Float => Col::F32(vec![s.as_f64() as f32; self.n]),
                    VType::Int if self.wide_i => Col::I64(vec![s.as_i64(); self.n]),
                    VType::Int => Col::I32(vec![s.as_i64() as i32; self.n]),
                    VType::Bool => Col::B(vec![s.as_bool(); self.n]),
                }
            }
            Expr::Cast(t, inner) => self.cast(self.eval(inner)?, *t),
            Expr::Unary(f, inner) => unary(*f, self.eval(inner)?),
            Expr::Binary(f, a, b) => binary(*f, self.eval(a)?, self.eval(b)?),
            Expr::Select(c, a, b) => {
                let Col::B(c) = self.eval(c)? else { return Ok(Col::B(vec![])) };
                macro_rules! sel {
                    ($v:ident, $x:expr, $y:expr) => {
                        Col::$v(
                            c.iter()
                                .zip($x)
                                .zip($y)
                                .map(|((&c, x), y)| if c { x } else { y })
                                .collect(),
                        )
                    };
                }
                match (self.eval(a)?, self.eval(b)?) {
                    (Col::F32(x), Col::F32(y)) => sel!(F32, x, y),
                    (Col::F64(x), Col::F64(y)) => sel!(F64, x, y),
                    (Col::I32(x), Col::I32(y)) => sel!(I32, x, y),
                    (Col::I64(x), Col::I64(y)) => sel!(I64, x, y),
                    (Col::B(x), Col::B(y)) => sel!(B, x, y),
                    _ => Col::B(vec![]),
                }
            }
        })
    }

    fn load(&self, t: &Tensor) -> Result<Col> {
        let s = self.shape;
        Ok(match t.dtype() {
            DType::F32 if self.wide_f => {
                Col::F64(read_input::<f32>(t, s)?.into_iter().map(f64::from).collect())
            }
            DType::F32 => Col::F32(read_input(t, s)?),
            DType::F16 if self.wide_f => {
                Col::F64(read_input::<f16>(t, s)?.into_iter().map(f64::from).collect())
            }
            DType::F16 => Col::F32(read_input::<f16>(t, s)?.into_iter().map(f32::from).collect()),
            DType::F64 => Col::F64(read_input(t, s)?),
            DType::I64 => Col::I64(read_input(t, s)?),
            DType::Bool => Col::B(read_input::<u8>(t, s)?.into_iter().map(|b| b != 0).collect()),
            d => {
                let v: Vec<i64> = match d {
                    DType::I32 => read_input::<i32>(t, s)?.into_iter().map(i64::from).collect(),
                    DType::U8 => read_input::<u8>(t, s)?.into_iter().map(i64::from).collect(),
                    _ => read_input::<i8>(t, s)?.into_iter().map(i64::from).collect(),
                };
                if self.wide_i {
                    Col::I64(v)
                } else {
                    Col::I32(v.into_iter().map(|x| x as i32).collect())
                }
            }
        })
    }

    fn cast(&self, c: Col, t: VType) -> Col {
        let (wf, wi) = (self.wide_f, self.wide_i);
        let fcol = |v: Vec<f64>| {
            if wf {
                Col::F64(v)
            } else {
                Col::F32(v.into_iter().map(|x| x as f32).collect())
            }
        };
        let icol = |v: Vec<i64>| {
            if wi {
                Col::I64(v)
            } else {
                Col::I32(v.into_iter().map(|x| x as i32).collect())
            }
        };
        match (c, t) {
            (c @ (Col::F32(_) | Col::F64(_)), VType::Float) => c,
            (c @ (Col::I32(_) | Col::I64(_)), VType::Int) => c,
            (c @ Col::B(_), VType::Bool) => c,
            (Col::F32(v), VType::Int) => icol(
                v.into_iter()
                    .map(|x| if wi { x as i64 } else { math::f_to_i32(x as f64) as i64 })
                    .collect(),
            ),
            (Col::F64(v), VType::Int) => icol(
                v.into_iter()
                    .map(|x| if wi { x as i64 } else { math::f_to_i32(x) as i64 })
                    .collect(),
            ),
            (Col::I32(v), VType::Float) => fcol(v.into_iter().map(f64::from).collect()),
            (Col::I64(v), VType::Float) => fcol(v.into_iter().map(|x| x as f64).collect()),
            (Col::B(v), VType::Float) => fcol(v.into_iter().map(|b| b as u8 as f64).collect()),
            (Col::B(v), VType::Int) => icol(v.into_iter().map(|b| b as i64).collect()),
            (Col::F32(v), VType::Bool) => Col::B(v.into_iter().map(|x| x != 0.0).collect()),
            (Col::F64(v), VType::Bool) => Col::B(v.into_iter().map(|x| x != 0.0).collect()),
            (Col::I32(v), VType::Bool) => Col::B(v.into_iter().map(|x| x != 0).collect()),
            (Col::I64(v), VType::Bool) => Col::B(v.into_iter().map(|x| x != 0).collect()),
        }
    }
}

/// `v.map(|x| g(f, x))` with the common ops matched *outside* the loop, so each arm is a
/// tight loop over a constant op (vectorized) instead of a per-element jump table.
macro_rules! hoist_unary {
    ($f:expr, $v:expr, $g:path) => {{
        use UnaryFn::*;
        macro_rules! arm {
            ($op:expr) => {
                $v.into_iter().map(|x| $g($op, x)).collect()
            };
        }
        match $f {
            Relu => arm!(Relu),
            Neg => arm!(Neg),
            Abs => arm!(Abs),
            Exp => arm!(Exp),
            Sqrt => arm!(Sqrt),
            Sigmoid => arm!(Sigmoid),
            Tanh => arm!(Tanh),
            f => arm!(f),
        }
    }};
}

/// Binary counterpart of [`hoist_unary!`].
macro_rules! hoist_binary {
    ($f:expr, $x:expr, $y:expr, $g:path) => {{
        use BinaryFn::*;
        macro_rules! arm {
            ($op:expr) => {
                $x.into_iter().zip($y).map(|(p, q)| $g($op, p, q)).collect()
            };
        }
        match $f {
            Add => arm!(Add),
            Sub => arm!(Sub),
            Mul => arm!(Mul),
            Div => arm!(Div),
            Max => arm!(Max),
            Min => arm!(Min),
            f => arm!(f),
        }
    }};
}

fn unary(f: UnaryFn, c: Col) -> Col {
    match c {
        Col::F32(v) if f == UnaryFn::IsNan => Col::B(v.into_iter().map(f32::is_nan).collect()),
        Col::F64(v) if f == UnaryFn::IsNan => Col::B(v.into_iter().map(f64::is_nan).collect()),
        Col::F32(v) => Col::F32(hoist_unary!(f, v, math::unary_f32)),
        Col::F64(v) => Col::F64(hoist_unary!(f, v, math::unary_f64)),
        Col::I32(v) => Col::I32(v.into_iter().map(|x| math::unary_i32(f, x)).collect()),
        Col::I64(v) => Col::I64(v.into_iter().map(|x| math::unary_i64(f, x)).collect()),
        Col::B(v) => Col::B(v.into_iter().map(|x| !x).collect()),
    }
}

fn binary(f: BinaryFn, a: Col, b: Col) -> Col {
    macro_rules! zip {
        ($x:expr, $y:expr, $g:expr) => {
            $x.into_iter().zip($y).map(|(p, q)| $g(p, q)).collect()
        };
    }
    if math::is_comparison(f) {
        return Col::B(match (a, b) {
            (Col::F32(x), Col::F32(y)) => zip!(x, y, |p, q| math::compare(f, p, q)),
            (Col::F64(x), Col::F64(y)) => zip!(x, y, |p, q| math::compare(f, p, q)),
            (Col::I32(x), Col::I32(y)) => zip!(x, y, |p, q| math::compare(f, p, q)),
            (Col::I64(x), Col::I64(y)) => zip!(x, y, |p, q| math::compare(f, p, q)),
            (Col::B(x), Col::B(y)) => zip!(x, y, |p, q| math::compare(f, p, q)),
            _ => vec![],
        });
    }
    match (a, b) {
        (Col::F32(x), Col::F32(y)) => Col::F32(hoist_binary!(f, x, y, math::binary_f32)),
        (Col::F64(x), Col::F64(y)) => Col::F64(hoist_binary!(f, x, y, math::binary_f64)),
        (Col::I32(x), Col::I32(y)) => Col::I32(zip!(x, y, |p, q| math::binary_i32(f, p, q))),
        (Col::I64(x), Col::I64(y)) => Col::I64(zip!(x, y, |p, q| math::binary_i64(f, p, q))),
        (Col::B(x), Col::B(y)) => {
            Col::B(zip!(x, y, |p: bool, q: bool| if f == BinaryFn::And { p && q } else { p || q }))
        }
        _ => Col::B(vec![]),
    }
}

/// Write a column as `out` dtype elements into `bytes` (exactly the column's size); integer
/// stores wrap (two's complement), float stores round.
fn store_into(c: &Col, out: DType, bytes: &mut [u8]) {
    macro_rules! put {
        ($t:ty, $conv:expr) => {{
            let dst: &mut [$t] = bytemuck::cast_slice_mut(bytes);
            match c {
                Col::F32(v) => {
                    v.iter().zip(dst.iter_mut()).for_each(|(x, d)| *d = $conv(*x as f64))
                }
                Col::F64(v) => v.iter().zip(dst.iter_mut()).for_each(|(x, d)| *d = $conv(*x)),
                Col::I32(v) => {
                    v.iter().zip(dst.iter_mut()).for_each(|(x, d)| *d = $conv(*x as f64))
                }
                Col::I64(v) => {
                    v.iter().zip(dst.iter_mut()).for_each(|(x, d)| *d = $conv(*x as f64))
                }
                Col::B(v) => {
                    v.iter().zip(dst.iter_mut()).for_each(|(x, d)| *d = $conv(*x as u8 as f64))
                }
            }
        }};
    }
    match (out, c) {
        // Integer stores from integer columns wrap exactly (no detour through f64).
        (DType::I32, Col::I32(v)) => bytemuck::cast_slice_mut::<u8, i32>(bytes).copy_from_slice(v),
        (DType::I64, Col::I64(v)) => bytemuck::cast_slice_mut::<u8, i64>(bytes).copy_from_slice(v),
        (DType::U8 | DType::I8, Col::I32(v)) => {
            bytes.iter_mut().zip(v).for_each(|(d, x)| *d = *x as u8)
        }
        (DType::U8 | DType::I8, Col::I64(v)) => {
            bytes.iter_mut().zip(v).for_each(|(d, x)| *d = *x as u8)
        }
        (DType::F32, Col::F32(v)) => bytemuck::cast_slice_mut::<u8, f32>(bytes).copy_from_slice(v),
        (DType::F32, _) => put!(f32, |x: f64| x as f32),
        (DType::F64, _) => put!(f64, |x: f64| x),
        (DType::F16, Col::F32(v)) => bytemuck::cast_slice_mut::<u8, f16>(bytes)
            .iter_mut()
            .zip(v)
            .for_each(|(d, x)| *d = f16::from_f32(*x)),
        (DType::F16, _) => put!(f16, f16::from_f64),
        (DType::I32, _) => put!(i32, |x: f64| x as i32),
        (DType::I64, _) => put!(i64, |x: f64| x as i64),
        (DType::U8 | DType::I8, _) => put!(u8, |x: f64| x as i64 as u8),
        (DType::Bool, _) => put!(u8, |x: f64| (x != 0.0) as u8),
    }
}
