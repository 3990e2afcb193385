//! Safe-ish helpers over the `OrtApi` table: the process-wide table pointers, `OrtStatus`
//! creation from our errors, and readers for names, types and shapes. Every helper turns a
//! failing ORT call into `Err(status)` so callbacks can hand it straight back to ORT.

use crate::abi::{self, OrtApi, OrtEpApi, Status};
use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

static API: OnceLock<OrtApi> = OnceLock::new();
static EP_API: AtomicPtr<OrtEpApi> = AtomicPtr::new(ptr::null_mut());

/// Installs the tables (first `CreateEpFactories`; a re-registration gets the same ones).
pub fn install(api: OrtApi) {
    let _ = API.set(api);
    // SAFETY: GetEpApi is valid in every ORT that returned the level-24 table.
    let ep = unsafe { api.GetEpApi() } as *mut OrtEpApi;
    EP_API.store(ep, Ordering::Release);
}

/// The `OrtApi` table. Only called from ORT callbacks, which run after `install`.
pub fn api() -> &'static OrtApi {
    API.get().expect("OrtApi is installed by CreateEpFactories before any callback")
}

pub fn ep_api() -> &'static OrtEpApi {
    let p = EP_API.load(Ordering::Acquire);
    assert!(!p.is_null(), "OrtEpApi is installed by CreateEpFactories before any callback");
    // SAFETY: ORT keeps the table alive for the life of the library.
    unsafe { &*p }
}

pub type R<T> = std::result::Result<T, Status>;

/// A new `OrtStatus` carrying `msg` (with `code`).
pub fn status(code: i32, msg: &str) -> Status {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: ORT copies the message.
    unsafe { api().CreateStatus(code, c.as_ptr()) }
}

pub fn fail(msg: impl AsRef<str>) -> Status {
    status(abi::ORT_EP_FAIL, &format!("MpsrtExecutionProvider: {}", msg.as_ref()))
}

/// `Err(status)` when an ORT call failed.
pub fn check(s: Status) -> R<()> {
    if s.is_null() {
        Ok(())
    } else {
        Err(s)
    }
}

/// The message of a status (for logs and tests); releases it.
pub fn take_message(s: Status) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: `s` is a live status we own.
    unsafe {
        let m = cstr(api().GetErrorMessage(s));
        api().ReleaseStatus(s);
        m
    }
}

/// Copies a C string (NULL reads as empty).
pub fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ORT hands out NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Reads an array through ORT's `(count, fill)` pair of calls.
pub fn array<T: Copy>(
    count: impl FnOnce(&mut usize) -> Status,
    fill: impl FnOnce(*mut T, usize) -> Status,
    zero: T,
) -> R<Vec<T>> {
    let mut n = 0usize;
    check(count(&mut n))?;
    let mut v = vec![zero; n];
    if n > 0 {
        check(fill(v.as_mut_ptr(), n))?;
    }
    Ok(v)
}

/// Element type and shape (`-1` for unknown dims, with their `dim_param` names) of a tensor
/// type; `None` for non-tensors or values without type information.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorType {
    pub elem: i32,
    /// `None` when ORT knows no shape (unknown rank).
    pub dims: Option<Vec<(i64, String)>>,
}

/// # Safety
/// `info` must be a live tensor type-and-shape info.
unsafe fn tensor_type_of(info: *const abi::OrtTensorTypeAndShapeInfo) -> R<TensorType> {
    let a = api();
    let mut elem = 0i32;
    // SAFETY: per the C API.
    unsafe {
        check(a.GetTensorElementType(info, &mut elem))?;
        let mut n = 0usize;
        check(a.GetDimensionsCount(info, &mut n))?;
        let mut dims = vec![0i64; n];
        let mut syms = vec![ptr::null::<c_char>(); n];
        if n > 0 {
            check(a.GetDimensions(info, dims.as_mut_ptr(), n))?;
            check(a.GetSymbolicDimensions(info, syms.as_mut_ptr(), n))?;
        }
        let dims = dims.into_iter().zip(syms).map(|(d, s)| (d, cstr(s))).collect();
        Ok(TensorType { elem, dims: Some(dims) })
    }
}

/// The tensor type of a value info (`None`: not a tensor, or no type known).
pub fn value_type(vi: *const abi::OrtValueInfo) -> R<Option<TensorType>> {
    if vi.is_null() {
        return Ok(None); // an omitted optional input or output
    }
    let a = api();
    let mut ti = ptr::null();
    // SAFETY: `vi` comes from ORT's graph accessors; the type info is owned by `vi`.
    unsafe {
        check(a.GetValueInfoTypeInfo(vi, &mut ti))?;
        if ti.is_null() {
            return Ok(None);
        }
        let mut kind = 0i32;
        check(a.GetOnnxTypeFromTypeInfo(ti, &mut kind))?;
        if kind != abi::ONNX_TYPE_TENSOR {
            return Ok(None);
        }
        let mut info = ptr::null();
        check(a.CastTypeInfoToTensorInfo(ti, &mut info))?;
        if info.is_null() {
            return Ok(None);
        }
        tensor_type_of(info).map(Some)
    }
}

/// Element type and concrete dims of a tensor `OrtValue` (on the `Compute` path: no
/// symbolic-dimension names are read).
pub fn value_tensor_type(v: *const abi::OrtValue) -> R<(i32, Vec<i64>)> {
    let a = api();
    let mut info = ptr::null_mut();
    // SAFETY: `v` is a live tensor value; the info is released here.
    unsafe {
        check(a.GetTensorTypeAndShape(v, &mut info))?;
        let read = || -> R<(i32, Vec<i64>)> {
            let (mut elem, mut n) = (0i32, 0usize);
            check(a.GetTensorElementType(info, &mut elem))?;
            check(a.GetDimensionsCount(info, &mut n))?;
            let mut dims = vec![0i64; n];
            if n > 0 {
                check(a.GetDimensions(info, dims.as_mut_ptr(), n))?;
            }
            Ok((elem, dims))
        };
        let r = read();
        a.ReleaseTensorTypeAndShapeInfo(info);
        r
    }
}

pub fn value_name(vi: *const abi::OrtValueInfo) -> R<String> {
    if vi.is_null() {
        return Ok(String::new()); // an omitted optional input
    }
    let mut p = ptr::null();
    // SAFETY: per the C API.
    check(unsafe { api().GetValueInfoName(vi, &mut p) })?;
    Ok(cstr(p))
}

macro_rules! node_str {
    ($name:ident, $f:ident) => {
        pub fn $name(n: *const abi::OrtNode) -> R<String> {
            let mut p = ptr::null();
            // SAFETY: per the C API.
            check(unsafe { api().$f(n, &mut p) })?;
            Ok(cstr(p))
        }
    };
}
node_str!(node_op, Node_GetOperatorType);
node_str!(node_domain, Node_GetDomain);
node_str!(node_name, Node_GetName);

pub fn node_inputs(n: *const abi::OrtNode) -> R<Vec<*const abi::OrtValueInfo>> {
    let a = api();
    // SAFETY: per the C API.
    array(
        |c| unsafe { a.Node_GetNumInputs(n, c) },
        |p, k| unsafe { a.Node_GetInputs(n, p, k) },
        ptr::null(),
    )
}

pub fn node_outputs(n: *const abi::OrtNode) -> R<Vec<*const abi::OrtValueInfo>> {
    let a = api();
    // SAFETY: per the C API.
    array(
        |c| unsafe { a.Node_GetNumOutputs(n, c) },
        |p, k| unsafe { a.Node_GetOutputs(n, p, k) },
        ptr::null(),
    )
}

pub fn graph_nodes(g: *const abi::OrtGraph) -> R<Vec<*const abi::OrtNode>> {
    let a = api();
    // SAFETY: per the C API.
    array(
        |c| unsafe { a.Graph_GetNumNodes(g, c) },
        |p, k| unsafe { a.Graph_GetNodes(g, p, k) },
        ptr::null(),
    )
}

pub fn graph_inputs(g: *const abi::OrtGraph) -> R<Vec<*const abi::OrtValueInfo>> {
    let a = api();
    // SAFETY: per the C API.
    array(
        |c| unsafe { a.Graph_GetNumInputs(g, c) },
        |p, k| unsafe { a.Graph_GetInputs(g, p, k) },
        ptr::null(),
    )
}

pub fn graph_outputs(g: *const abi::OrtGraph) -> R<Vec<*const abi::OrtValueInfo>> {
    let a = api();
    // SAFETY: per the C API.
    array(
        |c| unsafe { a.Graph_GetNumOutputs(g, c) },
        |p, k| unsafe { a.Graph_GetOutputs(g, p, k) },
        ptr::null(),
    )
}

/// `(domain, version)` of every opset the graph imports.
pub fn graph_opsets(g: *const abi::OrtGraph) -> R<Vec<(String, i64)>> {
    let a = api();
    let mut n = 0usize;
    // SAFETY: per the C API.
    unsafe {
        check(a.Graph_GetNumOperatorSets(g, &mut n))?;
        let mut d = vec![ptr::null::<c_char>(); n];
        let mut v = vec![0i64; n];
        if n > 0 {
            check(a.Graph_GetOperatorSets(g, d.as_mut_ptr(), v.as_mut_ptr(), n))?;
        }
        Ok(d.into_iter().map(cstr).zip(v).collect())
    }
}

/// The data of a constant initializer (`None` if `vi` is not one).
pub fn initializer(vi: *const abi::OrtValueInfo) -> R<Option<*const abi::OrtValue>> {
    if vi.is_null() {
        return Ok(None);
    }
    let a = api();
    let mut is_const = false;
    // SAFETY: per the C API.
    unsafe {
        check(a.ValueInfo_IsConstantInitializer(vi, &mut is_const))?;
        if !is_const {
            return Ok(None);
        }
        let mut v = ptr::null();
        check(a.ValueInfo_GetInitializerValue(vi, &mut v))?;
        Ok((!v.is_null()).then_some(v))
    }
}

/// The bytes of a tensor value (element count × element size; strings are refused earlier).
pub fn tensor_bytes<'a>(v: *const abi::OrtValue, elem: i32, dims: &[i64]) -> R<&'a [u8]> {
    let size = crate::convert::elem_size(elem)
        .ok_or_else(|| fail(format!("tensor element type {elem} has no fixed size")))?;
    let n: i64 = dims.iter().product();
    let len = usize::try_from(n).map_err(|_| fail(format!("negative dims {dims:?}")))? * size;
    if len == 0 {
        return Ok(&[]);
    }
    let mut p = ptr::null();
    // SAFETY: ORT's tensor holds `len` bytes at `p` for the duration of the callback.
    unsafe {
        check(api().GetTensorData(v, &mut p))?;
        Ok(std::slice::from_raw_parts(p as *const u8, len))
    }
}
