//! Paddle's plain-C kernel API (`PD_*` in `libphi_core.so`), resolved at load time with
//! `dlopen(RTLD_NOLOAD)` + `dlsym` (Python loads libpaddle with local symbols, and building
//! against Paddle would tie the crate to one wheel), plus the bridge between Paddle tensors and
//! mpsrt tensors: an input becomes an mpsrt [`Tensor`] over the plugin buffer window it lives
//! in (strides and view offset included); a result is stored into the output Paddle allocated.

#![allow(non_snake_case)]

use crate::abi::{pd_dtype, PD_List};
use crate::memory;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_runtime::Storage;
use mpsrt_tensor::Tensor;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

type T = c_void;
type St = *mut c_int;

macro_rules! api_table {
    ($($field:ident : fn($($a:ty),*) $(-> $r:ty)?;)*) => {
        /// Function pointers into `libphi_core.so`.
        pub struct Api { $(pub $field: unsafe extern "C-unwind" fn($($a),*) $(-> $r)?,)* }
        impl Api {
            unsafe fn load(h: *mut c_void) -> std::result::Result<Api, String> {
                Ok(Api { $($field: {
                    let name = concat!(stringify!($field), "\0");
                    // SAFETY: `h` is a live handle; the name is NUL-terminated.
                    let p = unsafe { libc::dlsym(h, name.as_ptr() as *const c_char) };
                    if p.is_null() {
                        return Err(format!("libphi_core.so has no {}", stringify!($field)));
                    }
                    // SAFETY: the symbol has this C signature in Paddle 3.x (c_*.h headers).
                    unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C-unwind" fn($($a),*) $(-> $r)?>(p) }
                },)* })
            }
        }
    };
}

api_table! {
    PD_KernelContextGetDeviceContext: fn(*mut T) -> *mut T;
    PD_KernelContextInputAt: fn(*mut T, usize) -> *mut T;
    PD_KernelContextMultiInputAt: fn(*mut T, usize) -> PD_List;
    PD_KernelContextOutputAt: fn(*mut T, usize) -> *mut T;
    PD_KernelContextMultiOutputAt: fn(*mut T, usize) -> PD_List;
    PD_KernelContextBoolAttrAt: fn(*mut T, usize) -> bool;
    PD_KernelContextInt32AttrAt: fn(*mut T, usize) -> i32;
    PD_KernelContextInt64AttrAt: fn(*mut T, usize) -> i64;
    PD_KernelContextFloatAttrAt: fn(*mut T, usize) -> f32;
    PD_KernelContextScalarAttrAt: fn(*mut T, usize) -> *mut T;
    PD_KernelContextIntArrayAttrAt: fn(*mut T, usize) -> *mut T;
    PD_KernelContextDataTypeAttrAt: fn(*mut T, usize) -> c_int;
    PD_KernelContextListInt32AttrAt: fn(*mut T, usize) -> PD_List;
    PD_KernelContextListInt64AttrAt: fn(*mut T, usize) -> PD_List;
    PD_KernelContextStringAttrAt: fn(*mut T, usize) -> *mut c_char;
    PD_StringAttr: fn(*mut c_void) -> *const c_char;
    PD_OptionalTensorGetPointer: fn(*mut T) -> *mut T;
    PD_DatatTypeAttr: fn(*mut c_void) -> c_int;
    PD_ListInt32Attr: fn(*mut c_void) -> PD_List;
    PD_ListInt64Attr: fn(*mut c_void) -> PD_List;
    PD_DeletePointerList: fn(PD_List);
    PD_TensorGetPDDataType: fn(*const T, St) -> c_int;
    PD_TensorGetDataPointer: fn(*const T, St) -> *mut c_void;
    PD_TensorIsInitialized: fn(*const T, St) -> bool;
    PD_TensorGetNumDims: fn(*const T, St) -> i64;
    PD_TensorGetDim: fn(*const T, usize, St) -> i64;
    PD_TensorGetNumStrides: fn(*const T, St) -> i64;
    PD_TensorGetStride: fn(*const T, usize, St) -> i64;
    PD_TensorGetOffset: fn(*const T, St) -> usize;
    PD_TensorSetDims: fn(*mut T, i64, *const i64, St);
    PD_TensorSetStrides: fn(*mut T, i64, *const i64, St);
    PD_TensorSetOffset: fn(*mut T, i64, St);
    PD_DeviceContextAllocateTensor: fn(*const T, *mut T, usize, c_int, St) -> *mut c_void;
    PD_IntArrayGetDataPointer: fn(*mut T) -> PD_List;
    PD_RegisterPhiKernel: fn(*const c_char, *const c_char, c_int, c_int, usize, *const c_int, usize,
        *const c_int, usize, *const c_int, extern "C-unwind" fn(*const c_void, *mut c_void),
        extern "C-unwind" fn(*mut c_void), *mut c_void);
}

static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();

/// The kernel API, once `libphi_core.so` is in the process (it is whenever Paddle loads us).
pub fn api() -> Result<&'static Api> {
    let r = API.get_or_init(|| {
        // SAFETY: RTLD_NOLOAD never loads anything; it finds the copy libpaddle pulled in.
        let h = unsafe {
            libc::dlopen(c"libphi_core.so".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY)
        };
        if h.is_null() {
            return Err(
                "libphi_core.so is not loaded (the plugin only registers kernels inside Paddle)"
                    .into(),
            );
        }
        // SAFETY: h is a live handle.
        unsafe { Api::load(h) }
    });
    r.as_ref().map_err(|e| Error::device("paddle", e.clone()))
}

fn check(op: &str, st: c_int, what: &str) -> Result<()> {
    if st == 0 {
        Ok(())
    } else {
        Err(Error::device(op, format!("Paddle's {what} failed (status {st})")))
    }
}

/// Paddle C-API dtype → mpsrt dtype.
pub fn dtype_from_pd(op: &str, d: c_int) -> Result<DType> {
    Ok(match d {
        pd_dtype::BOOL => DType::Bool,
        pd_dtype::UINT8 => DType::U8,
        pd_dtype::INT8 => DType::I8,
        pd_dtype::INT32 => DType::I32,
        pd_dtype::INT64 => DType::I64,
        pd_dtype::FLOAT16 => DType::F16,
        pd_dtype::FLOAT32 => DType::F32,
        pd_dtype::FLOAT64 => DType::F64,
        other => {
            return Err(Error::dtype(
                op,
                format!("Paddle dtype {} is not supported by mpsrt", pd_name(other)),
            ))
        }
    })
}

pub fn dtype_to_pd(d: DType) -> c_int {
    match d {
        DType::Bool => pd_dtype::BOOL,
        DType::U8 => pd_dtype::UINT8,
        DType::I8 => pd_dtype::INT8,
        DType::I32 => pd_dtype::INT32,
        DType::I64 => pd_dtype::INT64,
        DType::F16 => pd_dtype::FLOAT16,
        DType::F32 => pd_dtype::FLOAT32,
        DType::F64 => pd_dtype::FLOAT64,
    }
}

pub fn pd_name(d: c_int) -> &'static str {
    match d {
        pd_dtype::BOOL => "bool",
        pd_dtype::UINT8 => "uint8",
        pd_dtype::INT8 => "int8",
        pd_dtype::INT16 => "int16",
        pd_dtype::INT32 => "int32",
        pd_dtype::INT64 => "int64",
        pd_dtype::FLOAT16 => "float16",
        pd_dtype::FLOAT32 => "float32",
        pd_dtype::FLOAT64 => "float64",
        pd_dtype::BFLOAT16 => "bfloat16",
        14 => "complex64",
        15 => "complex128",
        _ => "undefined",
    }
}

/// Shape, strides and element type of a Paddle tensor.
#[derive(Clone)]
pub struct Meta {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub strides: Vec<isize>,
}

pub fn meta(op: &str, t: *const T) -> Result<Meta> {
    let a = api()?;
    let mut st = 0;
    // SAFETY: `t` is a live phi::DenseTensor handed to the kernel by Paddle.
    unsafe {
        let dtype = dtype_from_pd(op, (a.PD_TensorGetPDDataType)(t, &mut st))?;
        let nd = (a.PD_TensorGetNumDims)(t, &mut st).max(0) as usize;
        let dims: Vec<usize> =
            (0..nd).map(|i| (a.PD_TensorGetDim)(t, i, &mut st).max(0) as usize).collect();
        check(op, st, "tensor metadata query")?;
        let ns = (a.PD_TensorGetNumStrides)(t, &mut st).max(0) as usize;
        let strides = if ns == nd {
            (0..ns).map(|i| (a.PD_TensorGetStride)(t, i, &mut st) as isize).collect()
        } else {
            mpsrt_core::contiguous_strides(&dims)
        };
        Ok(Meta { dtype, dims, strides })
    }
}

/// A Paddle input tensor as an mpsrt tensor over the same device memory (no copy).
pub fn input(op: &str, t: *const T) -> Result<Tensor> {
    let m = meta(op, t)?;
    let numel: usize = m.dims.iter().product();
    let place = mpsrt_core::Place::Gpu(mpsrt_runtime::current_device());
    if numel == 0 {
        return mpsrt_tensor::empty(&m.dims, m.dtype, place);
    }
    let a = api()?;
    let mut st = 0;
    // SAFETY: live tensor. A tensor without memory (an input Paddle marks "no need buffer")
    // would make the data-pointer query throw, which must not unwind through Rust.
    if !unsafe { (a.PD_TensorIsInitialized)(t, &mut st) } {
        return Err(Error::invalid(op, "an input tensor holds no data"));
    }
    // SAFETY: live, initialized tensor; the pointer includes the view offset.
    let ptr = unsafe { (a.PD_TensorGetDataPointer)(t, &mut st) } as usize;
    check(op, st, "data pointer query")?;
    let es = m.dtype.size();
    // The furthest element the view reaches decides the byte range that must be resident.
    let reach: usize =
        m.dims.iter().zip(&m.strides).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>()
            + 1;
    let (buf, off) = memory::resolve(op, ptr, reach * es)?;
    if !off.is_multiple_of(es) {
        return Err(Error::invalid(
            op,
            format!("input at byte offset {off} is not aligned to its {} element size", m.dtype),
        ));
    }
    crate::log!(
        "  {op} input {ptr:#x} -> +{off} dims {:?} strides {:?} {}",
        m.dims,
        m.strides,
        m.dtype
    );
    let layout = Layout { shape: m.dims, strides: m.strides, offset: off / es };
    Tensor::from_storage(Storage::Gpu(buf), layout, m.dtype)
}

/// The dtype name of a Paddle tensor (one call: for the launch counters, on every op).
pub fn dtype_name(t: *const T) -> Option<&'static str> {
    let a = api().ok()?;
    let mut st = 0;
    // SAFETY: `t` is a live phi::DenseTensor of this launch.
    let d = unsafe { (a.PD_TensorGetPDDataType)(t, &mut st) };
    (st == 0).then(|| pd_name(d))
}

/// The device bytes `[address, address + len)` an input's view can reach (`None`: it holds no
/// memory). Host tensors yield host addresses, which never meet the plugin's.
pub fn byte_range(op: &str, t: *const T) -> Result<Option<(usize, usize)>> {
    if t.is_null() {
        return Ok(None);
    }
    let m = meta(op, t)?;
    if m.dims.contains(&0) {
        return Ok(None);
    }
    let a = api()?;
    let mut st = 0;
    // SAFETY: live tensor; an uninitialized one has no memory to ask about.
    if !unsafe { (a.PD_TensorIsInitialized)(t, &mut st) } {
        return Ok(None);
    }
    // SAFETY: live, initialized tensor.
    let ptr = unsafe { (a.PD_TensorGetDataPointer)(t, &mut st) } as usize;
    check(op, st, "data pointer query")?;
    let reach: usize =
        m.dims.iter().zip(&m.strides).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>()
            + 1;
    Ok(Some((ptr, reach * m.dtype.size())))
}

/// Dims and dtype Paddle's InferMeta gave an output.
pub fn out_meta(op: &str, out: *mut T) -> Result<Meta> {
    meta(op, out)
}

/// Check `result` against the output Paddle's InferMeta described (element count) and cast it
/// to that dtype. Runs inside the kernel body; the allocation happens later, in [`allocate`].
pub fn prepare(op: &str, m: &Meta, result: &Tensor) -> Result<Tensor> {
    let n: usize = m.dims.iter().product();
    if n != result.numel() {
        return Err(Error::shape(
            op,
            format!(
                "result has shape {:?}, Paddle expects {:?} for the output",
                result.shape(),
                m.dims
            ),
        ));
    }
    if result.dtype() == m.dtype {
        Ok(result.clone())
    } else {
        result.astype(m.dtype)
    }
}

/// Allocate output `out` through the device context (numel × element size). Paddle's allocator
/// may throw a C++ exception (e.g. out of memory): call this outside `catch_unwind`, so the
/// exception reaches Paddle's own handler.
///
/// # Safety
/// `dev_ctx` and `out` must be the live pointers of the current launch.
pub unsafe fn allocate(op: &str, dev_ctx: *const T, out: *mut T) -> Result<usize> {
    let a = api()?;
    let mut st = 0;
    // SAFETY: per the contract; size 0 = numel × element size.
    let ptr = unsafe {
        let dt = (a.PD_TensorGetPDDataType)(out, &mut st);
        (a.PD_DeviceContextAllocateTensor)(dev_ctx, out, 0, dt, &mut st)
    };
    check(op, st, "allocate output")?;
    Ok(ptr as usize)
}

/// Make `out` a view with `dims`, `strides` and byte `offset` into its allocation (allocating it
/// first if it has none) and return the address of its first element (`strided_copy`).
///
/// # Safety
/// As [`allocate`].
pub unsafe fn restride(
    op: &str,
    dev_ctx: *const T,
    out: *mut T,
    dims: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<usize> {
    let a = api()?;
    let mut st = 0;
    // SAFETY: per the contract; the arrays outlive the calls.
    unsafe {
        let mut p = (a.PD_TensorGetDataPointer)(out, &mut st);
        if p.is_null() {
            (a.PD_TensorSetDims)(out, dims.len() as i64, dims.as_ptr(), &mut st);
            p = (a.PD_DeviceContextAllocateTensor)(
                dev_ctx,
                out,
                0,
                (a.PD_TensorGetPDDataType)(out, &mut st),
                &mut st,
            );
        }
        let base = p as usize - (a.PD_TensorGetOffset)(out, &mut st);
        (a.PD_TensorSetDims)(out, dims.len() as i64, dims.as_ptr(), &mut st);
        (a.PD_TensorSetStrides)(out, strides.len() as i64, strides.as_ptr(), &mut st);
        (a.PD_TensorSetOffset)(out, offset, &mut st);
        check(op, st, "strided_copy output metadata")?;
        Ok(base + offset as usize)
    }
}

/// `phi::Scalar` (Paddle 3.x `ScalarBase<Tensor>`, no vtable): `bool is_from_tensor_;
/// DataType dtype_; union data_` (up to complex128, which is `alignas(16)`, so the union sits
/// at byte 16 and the struct is 32 bytes; checked against a live Paddle 3.3.1). Read directly: the C accessor for the
/// type, `PD_ScalarGetDataType`, is declared in the headers but not exported by 3.3.1.
#[repr(C)]
struct PhiScalar {
    is_from_tensor: bool,
    dtype: i32,
    data: Union16,
}

/// The union's storage: 16 bytes, 16-aligned like `phi::complex<double>`.
#[repr(C, align(16))]
struct Union16([u64; 2]);

/// `phi::DataType` (Paddle's internal numbering, not the C API's).
pub mod phi_dtype {
    pub const BOOL: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 7;
    pub const INT64: i32 = 9;
    pub const FLOAT32: i32 = 10;
    pub const FLOAT64: i32 = 11;
    pub const FLOAT16: i32 = 15;
    pub const BFLOAT16: i32 = 16;
}

/// An attribute of type `phi::Scalar`.
pub fn scalar(s: *mut T) -> Result<mpsrt_tensor::Scalar> {
    use mpsrt_tensor::Scalar as S;
    if s.is_null() {
        return Err(Error::invalid("scalar", "Paddle passed no scalar attribute"));
    }
    // SAFETY: `s` points at a live phi::Scalar (both entry points hand us one); the layout
    // is pinned by the test below.
    let p = unsafe { &*(s as *const PhiScalar) };
    let w = p.data.0[0];
    Ok(match p.dtype {
        phi_dtype::BOOL => S::B(w as u8 != 0),
        phi_dtype::UINT8 => S::I(w as u8 as i64),
        phi_dtype::INT8 => S::I(w as u8 as i8 as i64),
        phi_dtype::INT16 => S::I(w as u16 as i16 as i64),
        phi_dtype::INT32 => S::I(w as u32 as i32 as i64),
        phi_dtype::INT64 => S::I(w as i64),
        phi_dtype::FLOAT32 => S::F(f32::from_bits(w as u32) as f64),
        phi_dtype::FLOAT64 => S::F(f64::from_bits(w)),
        phi_dtype::FLOAT16 => S::F(half::f16::from_bits(w as u16).to_f64()),
        phi_dtype::BFLOAT16 => S::F(half::bf16::from_bits(w as u16).to_f64()),
        other => {
            return Err(Error::dtype(
                "scalar",
                format!("scalar attribute of phi type {other} is not supported"),
            ))
        }
    })
}

/// `phi::Attribute` alternatives (`paddle::variant` in `phi/core/attribute.h`, 3.x order).
mod attr_index {
    pub const INT: u32 = 1;
    pub const INT64: u32 = 2;
    pub const FLOAT: u32 = 3;
    pub const DOUBLE: u32 = 4;
    pub const SCALAR: u32 = 12;
    pub const TENSOR_REF: u32 = 18;
}

/// Scalar attribute `idx` of a kernel context. PIR programs pass a scalar that came from a
/// value (`paddle.scale(x, 3.0)` in a static graph: the 3.0 is a `full` op's output) as a
/// `phi::TensorRef`, which the C API's `PD_KernelContextScalarAttrAt` cannot read (it throws
/// "Attribute 0 cast error"); Paddle's own kernels unwrap it. So the attribute is read as the
/// `phi::Attribute` variant (`KernelContext::AttrAt(size_t)`, exported by libphi_core): 64
/// bytes, 16-aligned, the value at offset 0 and the `unsigned` alternative index at offset 48
/// (printed by g++ against the 3.3.1 headers), checked before use.
///
/// # Safety
/// `ctx` is the live kernel context of this launch and `idx` a scalar attribute of it.
pub unsafe fn ctx_scalar(ctx: *mut T, idx: usize) -> Result<mpsrt_tensor::Scalar> {
    use mpsrt_tensor::Scalar as S;
    type AttrAt = unsafe extern "C-unwind" fn(*const T, usize) -> *const u8;
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| {
        // SAFETY: RTLD_NOLOAD finds the copy Paddle loaded; the name is NUL-terminated.
        unsafe {
            let h = libc::dlopen(c"libphi_core.so".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if h.is_null() {
                return 0;
            }
            libc::dlsym(h, c"_ZNK3phi13KernelContext6AttrAtB5cxx11Em".as_ptr()) as usize
        }
    });
    let a = api()?;
    if f == 0 {
        // SAFETY: per the contract.
        return scalar(unsafe { (a.PD_KernelContextScalarAttrAt)(ctx, idx) });
    }
    // SAFETY: the symbol is `const Attribute& KernelContext::AttrAt(size_t) const`; the
    // returned variant lives as long as the context.
    let v = unsafe { std::mem::transmute::<usize, AttrAt>(f)(ctx, idx) };
    let index = unsafe { *(v.add(48) as *const u32) };
    let rd = |off| unsafe { std::ptr::read_unaligned(v.add(off) as *const u64) };
    Ok(match index {
        attr_index::SCALAR => return scalar(v as *mut T),
        attr_index::INT => S::I(rd(0) as u32 as i32 as i64),
        attr_index::INT64 => S::I(rd(0) as i64),
        attr_index::FLOAT => S::F(f32::from_bits(rd(0) as u32) as f64),
        attr_index::DOUBLE => S::F(f64::from_bits(rd(0))),
        attr_index::TENSOR_REF => tensor_scalar(rd(0) as usize as *const T)?,
        other => {
            return Err(Error::invalid(
                "scalar",
                format!("scalar attribute {idx} holds variant alternative {other}"),
            ))
        }
    })
}

/// The single value of a tensor (on the host or on this plugin's device).
fn tensor_scalar(t: *const T) -> Result<mpsrt_tensor::Scalar> {
    use mpsrt_tensor::Scalar as S;
    if t.is_null() {
        return Err(Error::invalid("scalar", "a tensor-valued scalar attribute has no tensor"));
    }
    let m = meta("scalar", t)?;
    if m.dims.iter().product::<usize>() != 1 {
        return Err(Error::shape("scalar", format!("scalar tensor of shape {:?}", m.dims)));
    }
    let a = api()?;
    let mut st = 0;
    // SAFETY: a live tensor of one element.
    let p = unsafe { (a.PD_TensorGetDataPointer)(t, &mut st) } as usize;
    check("scalar", st, "data pointer query")?;
    let mut b = [0u8; 8];
    let n = m.dtype.size();
    if memory::resolve("scalar", p, n).is_ok() {
        memory::read(p, &mut b[..n])?;
    } else {
        // A CPU tensor: Paddle's host memory, `n` readable bytes.
        // SAFETY: the tensor is initialized (it has a data pointer) and holds one element.
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, b.as_mut_ptr(), n) };
    }
    let w = u64::from_le_bytes(b);
    Ok(match m.dtype {
        DType::F32 => S::F(f32::from_bits(w as u32) as f64),
        DType::F64 => S::F(f64::from_bits(w)),
        DType::F16 => S::F(half::f16::from_bits(w as u16).to_f64()),
        DType::I32 => S::I(w as u32 as i32 as i64),
        DType::I64 => S::I(w as i64),
        DType::Bool => S::B(w as u8 != 0),
        DType::I8 => S::I(w as u8 as i8 as i64),
        DType::U8 => S::I(w as u8 as i64),
    })
}

/// An attribute of type `phi::IntArray`.
pub fn int_array(p: *mut T) -> Result<Vec<i64>> {
    let a = api()?;
    // SAFETY: `p` points at a live phi::IntArray; the list points into it (not owned).
    unsafe {
        let l = (a.PD_IntArrayGetDataPointer)(p);
        Ok(list_i64(l))
    }
}

/// # Safety
/// `l` must point at `l.size` int64 values.
pub unsafe fn list_i64(l: PD_List) -> Vec<i64> {
    if l.size == 0 || l.data.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(l.data as *const i64, l.size).to_vec() }
}

/// # Safety
/// `l` must point at `l.size` int32 values.
pub unsafe fn list_i32(l: PD_List) -> Vec<i32> {
    if l.size == 0 || l.data.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(l.data as *const i32, l.size).to_vec() }
}

/// Paddle's `common::ErrorCode` for an mpsrt error (decides the Python exception type).
pub fn error_code(kind: mpsrt_core::ErrorKind) -> i32 {
    use mpsrt_core::ErrorKind as K;
    match kind {
        K::InvalidArgument => 1,
        K::Shape => 1,
        K::DType => 13,
        K::OutOfMemory => 5,
        K::Unsupported => 9,
        _ => 12,
    }
}

/// Raise `msg` in Paddle's frame as its own `common::enforce::EnforceNotMet` (what
/// `PADDLE_THROW` raises; Paddle's Python bindings convert only that type, anything else
/// terminates the process). Built from symbols of `libcommon.so` / `libstdc++`: the summary is
/// `{ErrorCode code_; std::string msg_;}` (40 bytes, new string ABI). Returns only if a symbol
/// is missing.
pub fn throw_cxx(code: i32, msg: &str) {
    type Alloc = unsafe extern "C" fn(usize) -> *mut c_void;
    type StrCtor = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_void);
    type StrDtor = unsafe extern "C" fn(*mut c_void);
    type ErrCtor = unsafe extern "C" fn(*mut c_void, *const c_void, *const c_char, c_int);
    type Throw = unsafe extern "C-unwind" fn(*mut c_void, *mut c_void, *mut c_void) -> !;
    let cmsg = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: symbols looked up by their Itanium ABI names, each checked before use; the
    // summary buffer is 8-aligned and large enough for the 40-byte struct.
    unsafe {
        let find = |n: &CStr| {
            for lib in [c"libcommon.so", c"libstdc++.so.6"] {
                let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
                if !h.is_null() {
                    let p = libc::dlsym(h, n.as_ptr());
                    if !p.is_null() {
                        return p;
                    }
                }
            }
            libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr())
        };
        let alloc = find(c"__cxa_allocate_exception");
        let throw = find(c"__cxa_throw");
        let str_ctor = find(c"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_");
        let str_dtor = find(c"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEED1Ev");
        let err_ctor = find(c"_ZN6common7enforce13EnforceNotMetC1ERKNS_12ErrorSummaryEPKci");
        let err_dtor = find(c"_ZN6common7enforce13EnforceNotMetD1Ev");
        let tinfo = find(c"_ZTIN6common7enforce13EnforceNotMetE");
        if [alloc, throw, str_ctor, str_dtor, err_ctor, err_dtor, tinfo].iter().any(|p| p.is_null())
        {
            return;
        }
        let alloc = std::mem::transmute::<*mut c_void, Alloc>(alloc);
        let str_ctor = std::mem::transmute::<*mut c_void, StrCtor>(str_ctor);
        let str_dtor = std::mem::transmute::<*mut c_void, StrDtor>(str_dtor);
        let err_ctor = std::mem::transmute::<*mut c_void, ErrCtor>(err_ctor);
        let throw = std::mem::transmute::<*mut c_void, Throw>(throw);
        let mut summary = [0u64; 8];
        (summary.as_mut_ptr() as *mut i32).write(code);
        let s = summary.as_mut_ptr().add(1) as *mut c_void;
        let alloc_tag = 0u8;
        str_ctor(s, cmsg.as_ptr(), &alloc_tag as *const u8 as *const c_void);
        // EnforceNotMet is a few strings past std::exception; 1 KiB is ample.
        let e = alloc(1024);
        err_ctor(e, summary.as_ptr() as *const c_void, c"mpsrt-paddle".as_ptr(), 0);
        str_dtor(s);
        throw(e, tinfo, err_dtor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phi_scalar_layout() {
        assert_eq!(std::mem::size_of::<PhiScalar>(), 32);
        assert_eq!(std::mem::offset_of!(PhiScalar, dtype), 4);
        assert_eq!(std::mem::offset_of!(PhiScalar, data), 16);
    }

    #[test]
    fn scalar_decodes_each_type() {
        let mk = |dtype, w: u64| PhiScalar { is_from_tensor: false, dtype, data: Union16([w, 0]) };
        let get = |mut p: PhiScalar| scalar(&mut p as *mut PhiScalar as *mut T).unwrap();
        use mpsrt_tensor::Scalar as S;
        assert_eq!(get(mk(phi_dtype::FLOAT32, 2.5f32.to_bits() as u64)), S::F(2.5));
        assert_eq!(get(mk(phi_dtype::FLOAT64, (-1.25f64).to_bits())), S::F(-1.25));
        assert_eq!(get(mk(phi_dtype::INT32, (-3i32) as u32 as u64)), S::I(-3));
        assert_eq!(get(mk(phi_dtype::INT64, (-7i64) as u64)), S::I(-7));
        assert_eq!(get(mk(phi_dtype::BOOL, 1)), S::B(true));
        assert_eq!(
            get(mk(phi_dtype::FLOAT16, half::f16::from_f32(0.5).to_bits() as u64)),
            S::F(0.5)
        );
        assert!(scalar(&mut mk(13, 0) as *mut PhiScalar as *mut T).is_err());
    }
}
