//! Kernel registration. Every Paddle kernel needs two entry points with one body: the
//! `PD_KernelContext` function (static graphs / the PIR executor) and the "variadic" function
//! with the exact C++ kernel signature (eager mode; references arrive as pointers, bool / int /
//! float / DataType by value). [`kernel!`] generates both from one argument list, and both
//! build the same [`Call`] for the body, which runs mpsrt-tensor ops (the same kernels as the
//! rest of mpsrt) over tensors that wrap Paddle's device memory.

mod extra;
mod fast;
mod grad;
mod nn;
mod ops;
mod optim;
mod recorder;
mod register;

use crate::capi::{self, api};
use crate::stats;
use mpsrt_core::{DType, Error, Result};
use mpsrt_tensor::{Scalar, Tensor};
use std::ffi::c_void;

/// One argument of a kernel signature, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    In,
    /// `const paddle::optional<DenseTensor>&` (absent: a null tensor).
    OptIn,
    InList,
    Out,
    /// `std::vector<DenseTensor*>` (by value: the variadic entry point gets its address).
    OutList,
    Bool,
    I32,
    I64,
    F32,
    Scalar,
    IntArray,
    DType,
    VecI64,
    VecI32,
    /// `const std::string&`.
    Str,
}

/// A raw variadic argument before it is interpreted by its [`Kind`].
#[derive(Clone, Copy)]
pub enum Raw {
    P(usize),
    B(bool),
    I(i64),
    F(f64),
}
impl From<*const c_void> for Raw {
    fn from(p: *const c_void) -> Raw {
        Raw::P(p as usize)
    }
}
impl From<*mut c_void> for Raw {
    fn from(p: *mut c_void) -> Raw {
        Raw::P(p as usize)
    }
}
impl From<bool> for Raw {
    fn from(b: bool) -> Raw {
        Raw::B(b)
    }
}
impl From<i32> for Raw {
    fn from(v: i32) -> Raw {
        Raw::I(v as i64)
    }
}
impl From<i64> for Raw {
    fn from(v: i64) -> Raw {
        Raw::I(v)
    }
}
impl From<f32> for Raw {
    fn from(v: f32) -> Raw {
        Raw::F(v as f64)
    }
}

/// An attribute value.
#[derive(Clone, Debug)]
pub enum Val {
    B(bool),
    I(i64),
    F(f64),
    S(Scalar),
    Ints(Vec<i64>),
    /// `None`: DataType::UNDEFINED (keep the input's type).
    D(Option<DType>),
    Str(String),
}

/// A result waiting to be written into Paddle's output `out` once the body has returned.
pub enum Pending {
    /// Allocate the output (dims / dtype from InferMeta) and copy the tensor in.
    Out { out: usize, tensor: Tensor },
    /// Element `idx` of output list `list`.
    ListOut { list: usize, idx: usize, tensor: Tensor },
    /// `strided_copy`: re-view the output with dims / strides / byte offset, then copy.
    Strided { out: usize, tensor: Tensor, dims: Vec<i64>, strides: Vec<i64>, offset: i64 },
}

/// One kernel invocation, whichever entry point it came through.
pub struct Call {
    pub name: &'static str,
    pub dev_ctx: *const c_void,
    pub ins: Vec<*const c_void>,
    pub lists: Vec<Vec<*const c_void>>,
    pub attrs: Vec<Val>,
    pub outs: Vec<*mut c_void>,
    pub out_lists: Vec<Vec<*mut c_void>>,
    pub pending: std::cell::RefCell<Vec<Pending>>,
    /// The address of output 0 when it was allocated before the body ran (a `direct` kernel).
    pub dst: std::cell::Cell<Option<usize>>,
    /// Output 0's metadata, and the buffer and element offset of its memory, which the body
    /// may compute into (a tensor there is output 0 itself: see [`Call::is_out0`]).
    out0: std::cell::RefCell<Option<(capi::Meta, std::sync::Arc<mpsrt_runtime::GpuBuffer>, usize)>>,
    /// Inputs already wrapped (by [`Call::destination`]'s overlap check), so the body's first
    /// [`Call::input`] does not query Paddle and the address map a second time.
    ins_t: std::cell::RefCell<Vec<Option<Tensor>>>,
}

impl Call {
    fn new(name: &'static str) -> Call {
        Call {
            name,
            dev_ctx: std::ptr::null(),
            ins: vec![],
            lists: vec![],
            attrs: vec![],
            outs: vec![],
            out_lists: vec![],
            pending: Default::default(),
            dst: Default::default(),
            out0: Default::default(),
            ins_t: Default::default(),
        }
    }

    /// Output 0 (allocated before the body ran) as a dense mpsrt tensor over Paddle's memory,
    /// for the body's last elementwise launch to write into (`mt::with_destination`): no
    /// temporary, no copy. `None` (the result is copied in afterwards) when it was not
    /// preallocated, is empty, has a type the GPU lacks, or overlaps an input (an in-place op or
    /// a view of its own input: writing it while the kernel still reads would race).
    fn destination(&self) -> Result<Option<Tensor>> {
        let Some(addr) = self.dst.get() else {
            return Ok(None);
        };
        let m = capi::meta(self.name, self.outs[0])?;
        let n: usize = m.dims.iter().product();
        if n == 0 || !m.dtype.gpu_supported() {
            return Ok(None);
        }
        let bytes = n * m.dtype.size();
        let (buf, off) = crate::memory::resolve(self.name, addr, bytes)?;
        // Overlap with an input: the inputs are wrapped once here (kept for `input`); one that
        // cannot be wrapped (no memory, a host tensor) is checked by its address range.
        let mut wrapped = Vec::with_capacity(self.ins.len());
        for &t in &self.ins {
            let w = if t.is_null() { None } else { capi::input(self.name, t).ok() };
            let overlaps = match &w {
                Some(w) => overlaps_window(w, &buf, off, bytes),
                None => range_overlaps(self.name, t, addr, bytes)?,
            };
            if overlaps {
                return Ok(None);
            }
            wrapped.push(w);
        }
        for &t in self.lists.iter().flatten() {
            if range_overlaps(self.name, t, addr, bytes)? {
                return Ok(None);
            }
        }
        *self.ins_t.borrow_mut() = wrapped;
        let es = m.dtype.size();
        let layout = mpsrt_core::Layout::contiguous(&m.dims);
        let layout = mpsrt_core::Layout { offset: off / es, ..layout };
        let t = Tensor::from_storage(mpsrt_runtime::Storage::Gpu(buf.clone()), layout, m.dtype)?;
        *self.out0.borrow_mut() = Some((m, buf, off / es));
        Ok(Some(t))
    }

    /// Whether `t` already is output 0's memory (computed in place).
    fn is_out0(&self, t: &Tensor) -> bool {
        use mpsrt_runtime::Storage::Gpu;
        match (&*self.out0.borrow(), t.storage()) {
            (Some((_, ob, offset)), Gpu(b)) => {
                std::sync::Arc::ptr_eq(b, ob)
                    && t.layout().offset == *offset
                    && t.layout().is_contiguous()
            }
            _ => false,
        }
    }

    /// Input `i` as an mpsrt tensor over Paddle's memory.
    pub fn input(&self, i: usize) -> Result<Tensor> {
        if self.ins[i].is_null() {
            return Err(Error::invalid(self.name, format!("input {i} is missing")));
        }
        // Taken, not cloned (a clone copies the layout's vectors): bodies read an input once,
        // and a second read wraps it again.
        if let Some(t) = self.ins_t.borrow_mut().get_mut(i).and_then(Option::take) {
            return Ok(t);
        }
        capi::input(self.name, self.ins[i])
    }
    /// The dims of input `i` without touching its memory (Paddle passes some inputs of
    /// backward kernels, e.g. `x` of `add_grad`, with their metadata only).
    pub fn in_shape(&self, i: usize) -> Result<Vec<usize>> {
        Ok(capi::meta(self.name, self.ins[i])?.dims)
    }
    /// Optional input `i` (`None` when Paddle passed none).
    pub fn opt_input(&self, i: usize) -> Result<Option<Tensor>> {
        if self.ins[i].is_null() {
            return Ok(None);
        }
        capi::input(self.name, self.ins[i]).map(Some)
    }
    /// Whether output `i` is wanted (Paddle passes null for outputs nobody reads).
    pub fn wants(&self, i: usize) -> bool {
        !self.outs[i].is_null()
    }
    /// Tensor list input `i`.
    pub fn input_list(&self, i: usize) -> Result<Vec<Tensor>> {
        self.lists[i].iter().map(|&t| capi::input(self.name, t)).collect()
    }
    /// Store `t` as output `i` (cast to the dtype Paddle inferred). The copy into Paddle's
    /// memory happens after the body returns (see [`run`]).
    pub fn store(&self, i: usize, t: &Tensor) -> Result<()> {
        if self.outs[i].is_null() {
            return Ok(());
        }
        let t = match (i, &*self.out0.borrow()) {
            // Computed in place with Paddle's dtype and size: nothing to cast or copy later.
            (0, Some((m, _, _)))
                if t.dtype() == m.dtype
                    && t.numel() == m.dims.iter().product::<usize>()
                    && self.is_out0(t) =>
            {
                return Ok(());
            }
            (0, Some((m, _, _))) => capi::prepare(self.name, m, t)?,
            _ => capi::prepare(self.name, &capi::meta(self.name, self.outs[i])?, t)?,
        };
        self.pending.borrow_mut().push(Pending::Out { out: i, tensor: t });
        Ok(())
    }
    /// Store `t` as element `j` of output list `i` (cast to the dtype Paddle inferred).
    pub fn store_list(&self, i: usize, j: usize, t: &Tensor) -> Result<()> {
        let out = self.out_lists[i][j];
        if out.is_null() {
            return Ok(());
        }
        let t = capi::prepare(self.name, &capi::meta(self.name, out)?, t)?;
        self.pending.borrow_mut().push(Pending::ListOut { list: i, idx: j, tensor: t });
        Ok(())
    }
    /// Store `t`'s bytes unchanged as output `i` (byte counts must match).
    pub fn store_raw(&self, i: usize, t: &Tensor) -> Result<()> {
        let m = capi::out_meta(self.name, self.outs[i])?;
        let bytes = m.dims.iter().product::<usize>() * m.dtype.size();
        if bytes != t.numel() * t.dtype().size() {
            return Err(Error::shape(
                self.name,
                format!("{bytes} output bytes, result has {}", t.numel() * t.dtype().size()),
            ));
        }
        self.pending.borrow_mut().push(Pending::Out { out: i, tensor: t.clone() });
        Ok(())
    }
    /// The dtype Paddle's InferMeta gave output `i`.
    pub fn out_dtype(&self, i: usize) -> Result<DType> {
        Ok(capi::out_meta(self.name, self.outs[i])?.dtype)
    }
    pub fn out_shape(&self, i: usize) -> Result<Vec<usize>> {
        Ok(capi::out_meta(self.name, self.outs[i])?.dims)
    }
    pub fn bool(&self, i: usize) -> bool {
        matches!(self.attrs.get(i), Some(Val::B(true)))
    }
    pub fn int(&self, i: usize) -> i64 {
        match self.attrs.get(i) {
            Some(Val::I(v)) => *v,
            Some(Val::S(s)) => s.as_i64(),
            _ => 0,
        }
    }
    pub fn float(&self, i: usize) -> f64 {
        match self.attrs.get(i) {
            Some(Val::F(v)) => *v,
            Some(Val::I(v)) => *v as f64,
            Some(Val::S(s)) => s.as_f64(),
            _ => 0.0,
        }
    }
    pub fn scalar(&self, i: usize) -> Scalar {
        match self.attrs.get(i) {
            Some(Val::S(s)) => *s,
            Some(Val::F(v)) => Scalar::F(*v),
            Some(Val::I(v)) => Scalar::I(*v),
            Some(Val::B(b)) => Scalar::B(*b),
            _ => Scalar::F(0.0),
        }
    }
    pub fn ints(&self, i: usize) -> Vec<i64> {
        match self.attrs.get(i) {
            Some(Val::Ints(v)) => v.clone(),
            _ => vec![],
        }
    }
    pub fn string(&self, i: usize) -> &str {
        match self.attrs.get(i) {
            Some(Val::Str(s)) => s,
            _ => "",
        }
    }
    pub fn dtype(&self, i: usize) -> Option<DType> {
        match self.attrs.get(i) {
            Some(Val::D(d)) => *d,
            _ => None,
        }
    }

    fn push(&mut self, kind: Kind, raw: Raw) -> Result<()> {
        let a = api()?;
        let p = match raw {
            Raw::P(p) => p,
            _ => 0,
        };
        match (kind, raw) {
            (Kind::In, _) => self.ins.push(p as *const c_void),
            (Kind::OptIn, _) => {
                // SAFETY: Paddle passes a live paddle::optional<DenseTensor>; the accessor
                // returns its tensor or null.
                let t = if p == 0 {
                    std::ptr::null_mut()
                } else {
                    unsafe { (a.PD_OptionalTensorGetPointer)(p as *mut c_void) }
                };
                self.ins.push(t as *const c_void)
            }
            (Kind::Str, _) => {
                // SAFETY: Paddle passes a live std::string; the accessor returns its c_str().
                let s = unsafe { (a.PD_StringAttr)(p as *mut c_void) };
                self.attrs.push(Val::Str(cstr(s)))
            }
            (Kind::Out, _) => self.outs.push(p as *mut c_void),
            (Kind::OutList, _) => {
                // libstdc++'s `std::vector<DenseTensor*>`: {begin, end, cap}.
                let v = p as *const *const *mut c_void;
                // SAFETY: Paddle passes the address of a live std::vector of tensor pointers.
                let list = unsafe {
                    let (b, e) = (*v, *v.add(1));
                    let n = e.offset_from(b).max(0) as usize;
                    std::slice::from_raw_parts(b, n).to_vec()
                };
                self.out_lists.push(list);
            }
            (Kind::InList, _) => {
                // `const std::vector<const DenseTensor*>&`: libstdc++'s {begin, end, cap}.
                let v = p as *const *const *const c_void;
                // SAFETY: Paddle passes a live std::vector of tensor pointers.
                let list = unsafe {
                    let (b, e) = (*v, *v.add(1));
                    let n = e.offset_from(b).max(0) as usize;
                    std::slice::from_raw_parts(b, n).to_vec()
                };
                self.lists.push(list);
            }
            (Kind::Bool, Raw::B(b)) => self.attrs.push(Val::B(b)),
            (Kind::I32 | Kind::I64, Raw::I(v)) => self.attrs.push(Val::I(v)),
            (Kind::F32, Raw::F(v)) => self.attrs.push(Val::F(v)),
            (Kind::Scalar, _) => self.attrs.push(Val::S(capi::scalar(p as *mut c_void)?)),
            (Kind::IntArray, _) => self.attrs.push(Val::Ints(capi::int_array(p as *mut c_void)?)),
            (Kind::DType, Raw::I(v)) => {
                let mut phi = v as i32;
                // SAFETY: PD_DatatTypeAttr reads a phi::DataType (an int) through the pointer.
                let c = unsafe { (a.PD_DatatTypeAttr)(&mut phi as *mut i32 as *mut c_void) };
                self.attrs.push(Val::D(if c == 0 {
                    None
                } else {
                    Some(capi::dtype_from_pd(self.name, c)?)
                }));
            }
            // SAFETY: Paddle passes a live std::vector; the list points into it.
            (Kind::VecI64, _) => self
                .attrs
                .push(Val::Ints(unsafe { capi::list_i64((a.PD_ListInt64Attr)(p as *mut c_void)) })),
            (Kind::VecI32, _) => {
                // SAFETY: as above.
                let v = unsafe { capi::list_i32((a.PD_ListInt32Attr)(p as *mut c_void)) };
                self.attrs.push(Val::Ints(v.into_iter().map(i64::from).collect()));
            }
            (k, _) => {
                return Err(Error::invalid(
                    self.name,
                    format!("argument kind {k:?} got a value of the wrong type"),
                ))
            }
        }
        Ok(())
    }

    fn from_ctx(name: &'static str, ctx: *mut c_void, kinds: &[Kind]) -> Result<Call> {
        let a = api()?;
        let mut c = Call::new(name);
        let (mut ii, mut ai, mut oi) = (0usize, 0usize, 0usize);
        // SAFETY: `ctx` is the live PD_KernelContext of this launch; indices follow the
        // registered signature.
        unsafe {
            c.dev_ctx = (a.PD_KernelContextGetDeviceContext)(ctx);
            for &k in kinds {
                match k {
                    Kind::In | Kind::OptIn => {
                        c.ins.push((a.PD_KernelContextInputAt)(ctx, ii));
                        ii += 1;
                        continue;
                    }
                    Kind::InList => {
                        let l = (a.PD_KernelContextMultiInputAt)(ctx, ii);
                        let v = std::slice::from_raw_parts(l.data as *const *const c_void, l.size)
                            .to_vec();
                        (a.PD_DeletePointerList)(l);
                        c.lists.push(v);
                        ii += 1;
                        continue;
                    }
                    Kind::Out => {
                        c.outs.push((a.PD_KernelContextOutputAt)(ctx, oi));
                        oi += 1;
                        continue;
                    }
                    Kind::OutList => {
                        let l = (a.PD_KernelContextMultiOutputAt)(ctx, oi);
                        let v = if l.size == 0 || l.data.is_null() {
                            vec![]
                        } else {
                            std::slice::from_raw_parts(l.data as *const *mut c_void, l.size)
                                .to_vec()
                        };
                        (a.PD_DeletePointerList)(l);
                        c.out_lists.push(v);
                        oi += 1;
                        continue;
                    }
                    Kind::Bool => c.attrs.push(Val::B((a.PD_KernelContextBoolAttrAt)(ctx, ai))),
                    Kind::I32 => {
                        c.attrs.push(Val::I((a.PD_KernelContextInt32AttrAt)(ctx, ai) as i64))
                    }
                    Kind::I64 => c.attrs.push(Val::I((a.PD_KernelContextInt64AttrAt)(ctx, ai))),
                    Kind::F32 => {
                        c.attrs.push(Val::F((a.PD_KernelContextFloatAttrAt)(ctx, ai) as f64))
                    }
                    Kind::Scalar => c.attrs.push(Val::S(capi::ctx_scalar(ctx, ai)?)),
                    Kind::IntArray => c
                        .attrs
                        .push(Val::Ints(capi::int_array((a.PD_KernelContextIntArrayAttrAt)(
                            ctx, ai,
                        ))?)),
                    Kind::DType => {
                        let d = (a.PD_KernelContextDataTypeAttrAt)(ctx, ai);
                        c.attrs.push(Val::D(if d == 0 {
                            None
                        } else {
                            Some(capi::dtype_from_pd(name, d)?)
                        }));
                    }
                    Kind::VecI64 => {
                        c.attrs.push(Val::Ints(capi::list_i64(
                            (a.PD_KernelContextListInt64AttrAt)(ctx, ai),
                        )))
                    }
                    Kind::VecI32 => {
                        let v = capi::list_i32((a.PD_KernelContextListInt32AttrAt)(ctx, ai));
                        c.attrs.push(Val::Ints(v.into_iter().map(i64::from).collect()));
                    }
                    Kind::Str => {
                        c.attrs.push(Val::Str(cstr((a.PD_KernelContextStringAttrAt)(ctx, ai))))
                    }
                }
                ai += 1;
            }
        }
        Ok(c)
    }
}

/// Whether the bytes `w` (a tensor over a plugin buffer) can reach meet `[off, off + bytes)`
/// of `buf`. Each Paddle allocation is its own buffer behind disjoint addresses, so tensors in
/// different buffers never overlap.
fn overlaps_window(
    w: &Tensor,
    buf: &std::sync::Arc<mpsrt_runtime::GpuBuffer>,
    off: usize,
    bytes: usize,
) -> bool {
    let mpsrt_runtime::Storage::Gpu(b) = w.storage() else { return false };
    if !std::sync::Arc::ptr_eq(b, buf) || w.numel() == 0 {
        return false;
    }
    let l = w.layout();
    let es = w.dtype().size();
    let reach: usize =
        l.shape.iter().zip(&l.strides).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>()
            + 1;
    let start = l.offset * es;
    start < off + bytes && off < start + reach * es
}

/// Whether Paddle tensor `t`'s device bytes meet `[addr, addr + bytes)` (false for a null or
/// memoryless tensor).
fn range_overlaps(op: &str, t: *const c_void, addr: usize, bytes: usize) -> Result<bool> {
    Ok(capi::byte_range(op, t)?.is_some_and(|(p, len)| p < addr + bytes && addr < p + len))
}

/// A C string owned by Paddle, copied (empty when null).
fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: Paddle's accessors return NUL-terminated strings that live for the call.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub type Body = fn(&Call) -> Result<()>;

/// Run a kernel body behind the FFI boundary: panics are caught, and an error is raised in
/// Paddle's frame as a C++ exception (outside `catch_unwind`, which must not see a foreign
/// exception), so Python gets an exception naming the op and the process lives. Paddle calls
/// that may throw themselves (allocating the outputs) also run outside `catch_unwind`.
pub fn run(name: &'static str, direct: bool, build: impl FnOnce() -> Result<Call>, body: Body) {
    if let Some(msg) = settle() {
        return raise(capi::error_code(mpsrt_core::ErrorKind::Device), &msg);
    }
    if let Some((code, msg)) = run_inner(name, direct, build, body) {
        raise(code, &msg);
    }
}

/// Before a kernel of the general path: wait for the recorder thread's queue (see
/// `recorder.rs`), then take an error a deferred launch left, to raise it now.
fn settle() -> Option<String> {
    if !recorder::enabled() {
        return None;
    }
    recorder::drain();
    stats::take_pending_error()
}

pub use recorder::drain;

/// Raise `msg` in Paddle's frame as a C++ exception (see [`run`]).
pub(crate) fn raise(code: i32, msg: &str) {
    stats::set_error(msg);
    capi::throw_cxx(code, msg);
    // No C++ runtime to throw with: report at the next synchronize / read.
    eprintln!("[mpsrt] {msg}");
    stats::set_pending_error(msg);
}

/// [`run`] up to the error it would raise (status code and message), which the caller raises
/// (the fast path raises it after reading the launches the body recorded).
fn run_inner(
    name: &'static str,
    direct: bool,
    build: impl FnOnce() -> Result<Call>,
    body: Body,
) -> Option<(i32, String)> {
    // Reading the arguments calls into Paddle, which may throw (a C++ exception must not meet
    // `catch_unwind`); the code around those calls does not panic.
    let built = build();
    if let (true, Ok(c)) = (direct, &built) {
        // One output, allocated now (Paddle's allocator may throw: outside `catch_unwind`) so
        // the body can compute straight into it. A failure is reported by `finish`.
        if c.outs.len() == 1 && !c.outs[0].is_null() {
            // SAFETY: live pointers of this launch.
            c.dst.set(unsafe { capi::allocate(name, c.dev_ctx, c.outs[0]) }.ok());
        }
    }
    if noop_op().is_some_and(|f| f == name) {
        // Measurement hook: Paddle's own per-op cost on 'mps' (dispatch, InferMeta, its
        // allocator) with the plugin's work reduced to allocating the outputs.
        if let Ok(c) = &built {
            for &o in c.outs.iter().filter(|o| !o.is_null()).skip(usize::from(direct)) {
                // SAFETY: live pointers of this launch.
                let _ = unsafe { capi::allocate(name, c.dev_ctx, o) };
            }
        }
        return None;
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let c = built?;
        let first = c.ins.iter().chain(c.lists.iter().flatten()).find(|t| !t.is_null());
        let dt = first
            .copied()
            .or(c.outs.first().map(|&o| o as *const c_void))
            .and_then(|t| capi::dtype_name(t));
        crate::log!("kernel {name} ({}) attrs {:?}", dt.unwrap_or("-"), c.attrs);
        if fail_op().is_some_and(|f| f == name) {
            return Err(Error::device(name, "failing on purpose (MPSRT_PADDLE_FAIL_OP)"));
        }
        match c.destination()? {
            Some(out) => mpsrt_tensor::with_destination(&out, || body(&c))?,
            None => body(&c)?,
        }
        Ok::<_, Error>((c, dt))
    }));
    Some(match r {
        Ok(Ok((c, dt))) => match finish(&c) {
            Ok(()) => {
                stats::count_kernel(name, dt.unwrap_or("-"));
                return None;
            }
            Err(e) => (capi::error_code(e.kind), format!("mpsrt: {e}")),
        },
        Ok(Err(e)) => (capi::error_code(e.kind), format!("mpsrt: {e}")),
        Err(p) => (12, format!("mpsrt: [{name}] internal error: {}", crate::panic_message(&p))),
    })
}

/// Allocate the outputs (Paddle may throw: no `catch_unwind` here) and copy the results in
/// (Rust only: under `catch_unwind`).
fn finish(c: &Call) -> Result<()> {
    for p in c.pending.borrow().iter() {
        let (addr, t) = match p {
            // Computed in place: nothing to copy.
            Pending::Out { out: 0, tensor } if c.is_out0(tensor) => continue,
            Pending::Out { out: 0, tensor } if c.dst.get().is_some() => {
                (c.dst.get().unwrap_or_default(), tensor)
            }
            // SAFETY: live pointers of this launch.
            Pending::Out { out, tensor } => unsafe {
                (capi::allocate(c.name, c.dev_ctx, c.outs[*out])?, tensor)
            },
            // SAFETY: as above.
            Pending::ListOut { list, idx, tensor } => unsafe {
                (capi::allocate(c.name, c.dev_ctx, c.out_lists[*list][*idx])?, tensor)
            },
            // SAFETY: as above.
            Pending::Strided { out, tensor, dims, strides, offset } => unsafe {
                (capi::restride(c.name, c.dev_ctx, c.outs[*out], dims, strides, *offset)?, tensor)
            },
        };
        if t.numel() == 0 {
            continue;
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::memory::store(c.name, addr, t)
        }))
        .unwrap_or_else(|p| {
            Err(Error::device(c.name, format!("internal error: {}", crate::panic_message(&p))))
        })?;
    }
    Ok(())
}

/// Measurement hook: `MPSRT_PADDLE_NOOP_OP=<kernel>` makes that kernel allocate its outputs and
/// return without computing them (their contents are undefined), so `bench/paddle_plugin.py
/// noop` can time what Paddle's custom-device path costs by itself.
pub(super) fn noop_op() -> Option<&'static str> {
    static F: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    F.get_or_init(|| std::env::var("MPSRT_PADDLE_NOOP_OP").ok()).as_deref()
}

/// Test hook: `MPSRT_PADDLE_FAIL_OP=<kernel>` makes that kernel fail, to exercise the error path.
/// Test hook: `MPSRT_PADDLE_FAIL_DEFERRED=<kernel>` makes the recorder thread fail that
/// kernel's deferred launches, to exercise the deferred error path.
pub(super) fn fail_deferred() -> Option<&'static str> {
    static F: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    F.get_or_init(|| std::env::var("MPSRT_PADDLE_FAIL_DEFERRED").ok()).as_deref()
}

pub(super) fn fail_op() -> Option<&'static str> {
    static F: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    F.get_or_init(|| std::env::var("MPSRT_PADDLE_FAIL_OP").ok()).as_deref()
}

pub fn run_ctx(
    name: &'static str,
    direct: bool,
    ctx: *mut c_void,
    kinds: &'static [Kind],
    body: Body,
) {
    run(name, direct, || Call::from_ctx(name, ctx, kinds), body)
}

pub fn run_var(
    name: &'static str,
    direct: bool,
    dev: *const c_void,
    args: &[(Kind, Raw)],
    body: Body,
) {
    let build = || {
        let mut c = Call::new(name);
        c.dev_ctx = dev;
        for &(k, r) in args {
            c.push(k, r)?;
        }
        Ok(c)
    };
    if direct {
        match fast::try_launch(name, dev, args) {
            fast::Outcome::Done => return,
            fast::Outcome::Failed(code, msg) => return raise(code, &msg),
            fast::Outcome::Learn(plan) => {
                if let Some(msg) = settle() {
                    return raise(capi::error_code(mpsrt_core::ErrorKind::Device), &msg);
                }
                let (err, launches) =
                    mpsrt_runtime::capture_launches(|| run_inner(name, direct, build, body));
                if err.is_none() {
                    plan.learn(&launches);
                }
                if let Some((code, msg)) = err {
                    raise(code, &msg);
                }
                return;
            }
            fast::Outcome::No => {}
        }
    }
    run(name, direct, build, body)
}

pub(crate) use register::{kernel, vty};
pub use register::{register_all, registered, KernelDef};
