//! The eager fast path of one-launch elementwise kernels (`paddle.add` on small tensors).
//!
//! A tiny eager op spends most of the plugin's time on planning, not on the GPU: wrapping
//! Paddle's tensors, building the expression, looking its pipeline up, packing the metadata,
//! each with a handful of heap allocations. For a `direct` kernel whose arguments are only
//! tensors (`[In.., Out]`), dense, of the output's dims, in distinct buffers, the launch the
//! general path records is a function of (kernel, device, dtypes, dims, element
//! offsets): the first call with such a key runs the general path under
//! [`mpsrt_runtime::capture_launches`]; if it recorded exactly one dispatch whose bindings are
//! the op's own input and output buffers, the dispatch (pipeline, binding roles and windows,
//! metadata bytes, workgroups) is kept in a per-thread memo. Later calls with the key record
//! that dispatch with their own buffers through the same `GpuDevice::dispatch`: the same
//! kernel, the same metadata, no second implementation of any op. Anything else (broadcast,
//! views, in-place, aliased inputs, int64 on the host, a copy or several launches, the debug
//! log or a test hook) takes the general path, and a key found not to qualify is remembered
//! as such so it is not captured again. `MPSRT_PADDLE_FAST=0` turns the fast path off.

use super::{Kind, Raw};
use crate::{capi, memory, stats};
use mpsrt_core::DType;
use mpsrt_runtime::{GpuBuffer, Launch, Pipeline};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Arc;

/// Most tensor inputs of a fast-path kernel (`where` has three).
pub(super) const MAX_INS: usize = 3;
/// Most dims of a fast-path tensor (more: the general path).
const MAX_DIMS: usize = 9;
/// Memo entries per thread before it is cleared and refilled.
const MAX_MEMO: usize = 1024;
/// The output's slot in roles, buffers and key arrays (inputs are 0..MAX_INS).
pub(super) const OUT: usize = MAX_INS;

/// What [`try_launch`] did.
pub enum Outcome {
    /// Launched (counted as a kernel launch).
    Done,
    /// The replayed dispatch failed: raise this (status code, message).
    Failed(i32, String),
    /// Eligible but not seen yet: run the general path under a capture, then [`Plan::learn`].
    Learn(Plan),
    /// Not eligible (or known not to qualify): the general path.
    No,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    name: usize,
    device: usize,
    numel: usize,
    /// The dims every operand has (elementwise launches depend only on `numel`; kept so a
    /// kernel whose launch depends on the shape can never replay another shape's).
    nd: usize,
    dims: [i64; MAX_DIMS],
    /// Paddle dtype codes of inputs 0..n and of the output (at `OUT`); 0xff: no such input.
    dtypes: [u8; MAX_INS + 1],
    /// Element offsets of each operand in its buffer.
    offs: [usize; MAX_INS + 1],
}

/// One dispatch to replay: binding `i` is operand `roles[i].0`'s buffer with window
/// `roles[i].1`.
pub struct Entry {
    pub pipeline: Pipeline,
    pub roles: Vec<(usize, Option<(u64, u64)>)>,
    pub meta: Vec<u8>,
    pub workgroups: [u32; 3],
}

thread_local! {
    /// `None`: the key was captured once and does not qualify.
    static MEMO: RefCell<FxHashMap<Key, Option<Arc<Entry>>>> = RefCell::default();
}

/// A key seen for the first time, with the buffer addresses the general path will bind.
pub struct Plan {
    key: Key,
    bufs: [usize; MAX_INS + 1],
    n_in: usize,
}

impl Plan {
    /// Keep the captured dispatch when it is exactly one launch over this op's own buffers
    /// (else remember that the key does not qualify).
    pub fn learn(&self, launches: &[Launch]) {
        let entry = match launches {
            [l] if l.device == self.key.device => {
                let roles: Option<Vec<_>> = l
                    .bindings
                    .iter()
                    .map(|&(addr, window)| {
                        let role = (0..self.n_in).chain([OUT]).find(|&k| self.bufs[k] == addr)?;
                        Some((role, window))
                    })
                    .collect();
                roles.filter(|r| r.iter().any(|&(k, _)| k == OUT)).map(|roles| {
                    Arc::new(Entry {
                        pipeline: l.pipeline.clone(),
                        roles,
                        meta: l.meta.clone(),
                        workgroups: l.workgroups,
                    })
                })
            }
            _ => None,
        };
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            if m.len() >= MAX_MEMO {
                m.clear();
            }
            m.insert(self.key, entry);
        });
    }
}

/// Dtype, dims and density of a Paddle tensor, without allocating.
struct Info {
    pd: i32,
    dtype: DType,
    nd: usize,
    dims: [i64; MAX_DIMS],
}

/// `None` when `t` cannot take the fast path (too many dims, a view with its own strides, a
/// dtype the GPU lacks, a failed query).
fn info(a: &capi::Api, t: *const c_void) -> Option<Info> {
    let mut st = 0;
    // SAFETY: `t` is a live phi::DenseTensor of this launch; the queries only read it.
    unsafe {
        let pd = (a.PD_TensorGetPDDataType)(t, &mut st);
        let dtype = capi::dtype_from_pd("", pd).ok().filter(|d| d.gpu_supported())?;
        let nd = (a.PD_TensorGetNumDims)(t, &mut st);
        if !(0..=MAX_DIMS as i64).contains(&nd) {
            return None;
        }
        let nd = nd as usize;
        let mut dims = [0i64; MAX_DIMS];
        for (i, d) in dims.iter_mut().enumerate().take(nd) {
            *d = (a.PD_TensorGetDim)(t, i, &mut st);
        }
        if (a.PD_TensorGetNumStrides)(t, &mut st) == nd as i64 {
            let mut dense = 1i64;
            for i in (0..nd).rev() {
                if dims[i] > 1 && (a.PD_TensorGetStride)(t, i, &mut st) != dense {
                    return None;
                }
                dense *= dims[i];
            }
        }
        (st == 0).then_some(Info { pd, dtype, nd, dims })
    }
}

/// `MPSRT_PADDLE_FAST=0` turns the fast path off (every launch planned by the general path),
/// for A/B measurements and to rule it out when debugging.
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_PADDLE_FAST").map_or(true, |v| v != "0"))
}

/// The fast path for a `direct` kernel called through its variadic entry point.
pub fn try_launch(name: &'static str, dev_ctx: *const c_void, args: &[(Kind, Raw)]) -> Outcome {
    let Some(((Kind::Out, Raw::P(out)), ins)) = args.split_last() else {
        return Outcome::No;
    };
    let out = *out as *mut c_void;
    if ins.is_empty()
        || ins.len() > MAX_INS
        || out.is_null()
        || !enabled()
        // A deferred launch failed: the general path raises it now (`kernels::settle`).
        || (super::recorder::enabled() && stats::has_pending_error())
        || stats::LOG.load(std::sync::atomic::Ordering::Relaxed)
        || super::noop_op().is_some_and(|f| f == name)
        || super::fail_op().is_some_and(|f| f == name)
    {
        return Outcome::No;
    }
    let Ok(a) = capi::api() else { return Outcome::No };
    let Some(o) = info(a, out) else { return Outcome::No };
    let numel: usize = o.dims[..o.nd].iter().map(|&d| d.max(0) as usize).product();
    if numel == 0 {
        return Outcome::No;
    }
    let mut key = Key {
        name: name.as_ptr() as usize,
        device: 0,
        numel,
        nd: o.nd,
        dims: o.dims,
        dtypes: [0xff; MAX_INS + 1],
        offs: [0; MAX_INS + 1],
    };
    let mut held: [Option<Arc<GpuBuffer>>; MAX_INS + 1] = Default::default();
    for (k, &(kind, raw)) in ins.iter().enumerate() {
        let (Kind::In, Raw::P(t)) = (kind, raw) else { return Outcome::No };
        let t = t as *const c_void;
        if t.is_null() {
            return Outcome::No;
        }
        let Some(i) = info(a, t) else { return Outcome::No };
        if i.dims[..i.nd] != o.dims[..o.nd] {
            return Outcome::No;
        }
        let mut st = 0;
        // SAFETY: live tensor; the data pointer is only asked of an initialized one (the
        // query throws otherwise).
        let ptr = unsafe {
            if !(a.PD_TensorIsInitialized)(t, &mut st) {
                return Outcome::No;
            }
            (a.PD_TensorGetDataPointer)(t, &mut st) as usize
        };
        let es = i.dtype.size();
        let Ok((buf, off)) = memory::resolve(name, ptr, numel * es) else { return Outcome::No };
        // Aliased inputs (`x + x`) would make a binding's role ambiguous.
        if st != 0 || off % es != 0 || held[..k].iter().flatten().any(|b| Arc::ptr_eq(b, &buf)) {
            return Outcome::No;
        }
        key.dtypes[k] = i.pd as u8;
        key.offs[k] = off / es;
        held[k] = Some(buf);
    }
    // SAFETY: live pointers of this launch. Paddle's allocator may throw: not under
    // `catch_unwind`. The general path, if taken after this, allocates again and gets the
    // same memory (Paddle keeps a holder that is large enough).
    let Ok(addr) = (unsafe { capi::allocate(name, dev_ctx, out) }) else { return Outcome::No };
    let es = o.dtype.size();
    let Ok((obuf, ooff)) = memory::resolve(name, addr, numel * es) else { return Outcome::No };
    if ooff % es != 0 || held.iter().flatten().any(|b| Arc::ptr_eq(b, &obuf)) {
        return Outcome::No;
    }
    key.dtypes[OUT] = o.pd as u8;
    key.offs[OUT] = ooff / es;
    key.device = obuf.device().index();
    held[OUT] = Some(obuf);
    let found = MEMO.with(|m| m.borrow().get(&key).cloned());
    let entry = match found {
        Some(Some(e)) => e,
        Some(None) => return Outcome::No,
        None => {
            let mut bufs = [0usize; MAX_INS + 1];
            for (b, h) in bufs.iter_mut().zip(&held) {
                *b = h.as_ref().map_or(0, |h| Arc::as_ptr(h) as usize);
            }
            return Outcome::Learn(Plan { key, bufs, n_in: ins.len() });
        }
    };
    let dtype_name = capi::pd_name(key.dtypes[0] as i32);
    if super::recorder::enabled() {
        stats::count_kernel(name, dtype_name);
        stats::count_fast();
        super::recorder::submit(super::recorder::Job { name, entry, bufs: held });
        return Outcome::Done;
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::recorder::replay(name, &entry, &held)
    }));
    match r {
        Ok(Ok(())) => {
            stats::count_kernel(name, dtype_name);
            stats::count_fast();
            Outcome::Done
        }
        Ok(Err(e)) => Outcome::Failed(capi::error_code(e.kind), format!("mpsrt: {e}")),
        Err(p) => Outcome::Failed(
            12,
            format!("mpsrt: [{name}] internal error: {}", crate::panic_message(&p)),
        ),
    }
}
