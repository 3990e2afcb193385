//! ONNX `TensorProto` → `HostTensor`: dtype mapping, raw vs typed storage fields, and external
//! data files. Every size comes from an untrusted file, so counts are checked against the bytes
//! actually present before anything is allocated.

use crate::proto::tensor_proto::DataType as T;
use crate::proto::TensorProto;
use mpsrt_core::{DType, Error, Result};
use mpsrt_graph::{ElemType, HostTensor};
use std::path::{Component, Path};

const OP: &str = "onnx";

/// Maps an ONNX element type to the mpsrt dtype it is stored as ([`ElemType::stored`]): INT16 /
/// UINT16 widen to int32 and UINT32 to int64 (exact); UINT64 narrows to int64 with a range
/// check on data.
pub fn map_dtype(code: i32, what: &str) -> Result<DType> {
    elem_type(code, what).map(ElemType::stored)
}

/// An ONNX element type code as the declared [`ElemType`]; an error for types mpsrt cannot hold.
pub fn elem_type(code: i32, what: &str) -> Result<ElemType> {
    let t = T::try_from(code)
        .map_err(|_| Error::dtype(OP, format!("{what}: unknown ONNX element type {code}")))?;
    Ok(match t {
        T::Float => ElemType::F32,
        T::Uint8 => ElemType::U8,
        T::Int8 => ElemType::I8,
        T::Uint16 => ElemType::U16,
        T::Int16 => ElemType::I16,
        T::Int32 => ElemType::I32,
        T::Int64 => ElemType::I64,
        T::Uint32 => ElemType::U32,
        T::Uint64 => ElemType::U64,
        T::Bool => ElemType::Bool,
        T::Float16 => ElemType::F16,
        T::Double => ElemType::F64,
        T::Undefined => return Err(Error::dtype(OP, format!("{what}: element type is UNDEFINED"))),
        other => {
            return Err(Error::unsupported(
                OP,
                format!(
                    "{what}: ONNX element type {} is not supported by mpsrt",
                    other.as_str_name()
                ),
            ))
        }
    })
}

/// Bytes per element of the ONNX storage type in `raw_data`.
fn raw_size(t: T) -> usize {
    match t {
        T::Uint8 | T::Int8 | T::Bool => 1,
        T::Uint16 | T::Int16 | T::Float16 => 2,
        T::Float | T::Int32 | T::Uint32 => 4,
        _ => 8,
    }
}

/// Reads a tensor; `base_dir` is the model's directory for external data (None when loading
/// from bytes, in which case external data is an error).
pub fn to_host(t: &TensorProto, base_dir: Option<&Path>) -> Result<HostTensor> {
    let name = t.name.clone().unwrap_or_default();
    let what = format!("tensor {name:?}");
    let code = t.data_type.unwrap_or(0);
    let dtype = map_dtype(code, &what)?;
    let src = T::try_from(code).unwrap_or(T::Undefined);
    if t.segment.is_some() {
        return Err(Error::unsupported(OP, format!("{what} is segmented (not supported)")));
    }
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(Error::shape(OP, format!("{what} has negative dimension in {:?}", t.dims)));
        }
        shape.push(
            usize::try_from(d)
                .map_err(|_| Error::shape(OP, format!("{what}: dimension {d} too large")))?,
        );
    }
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| n.checked_mul(8).is_some())
        .ok_or_else(|| Error::shape(OP, format!("{what}: shape {shape:?} overflows")))?;
    let count_err = |got: usize| {
        Error::shape(
            OP,
            format!("{what}: shape {shape:?} needs {n} elements but the data holds {got}"),
        )
    };
    let raw: Option<Vec<u8>> = if t.data_location == Some(1) {
        Some(read_external(t, base_dir, &what)?)
    } else {
        t.raw_data.clone()
    };
    if let Some(raw) = raw {
        let sz = raw_size(src);
        if raw.len() != n * sz {
            return Err(count_err(raw.len() / sz));
        }
        return from_raw(dtype, src, shape, &raw, &what);
    }
    // Typed storage fields.
    let out = match src {
        T::Float => {
            check(t.float_data.len(), n, count_err)?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        T::Double => {
            check(t.double_data.len(), n, count_err)?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        T::Int64 => {
            check(t.int64_data.len(), n, count_err)?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        T::Uint32 | T::Uint64 => {
            check(t.uint64_data.len(), n, count_err)?;
            let mut b = Vec::with_capacity(n * 8);
            for &v in &t.uint64_data {
                b.extend(narrow_u64(v, &what)?.to_le_bytes());
            }
            b
        }
        T::Int32 | T::Int16 | T::Uint16 => {
            check(t.int32_data.len(), n, count_err)?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        T::Int8 | T::Uint8 | T::Bool => {
            check(t.int32_data.len(), n, count_err)?;
            t.int32_data
                .iter()
                .map(|&v| if src == T::Bool { (v != 0) as u8 } else { v as u8 })
                .collect()
        }
        T::Float16 => {
            // FLOAT16 stores its bit pattern in the low 16 bits of int32_data.
            check(t.int32_data.len(), n, count_err)?;
            t.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect()
        }
        _ => return Err(Error::unsupported(OP, format!("{what}: unsupported storage"))),
    };
    HostTensor::new(dtype, shape, out)
}

fn check(got: usize, want: usize, err: impl Fn(usize) -> Error) -> Result<()> {
    if got != want {
        return Err(err(got));
    }
    Ok(())
}

fn narrow_u64(v: u64, what: &str) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::dtype(OP, format!("{what}: value {v} does not fit int64")))
}

fn from_raw(dtype: DType, src: T, shape: Vec<usize>, raw: &[u8], what: &str) -> Result<HostTensor> {
    let bytes: Vec<u8> = match src {
        T::Bool => raw.iter().map(|&b| (b != 0) as u8).collect(),
        T::Int16 => raw
            .chunks_exact(2)
            .flat_map(|c| (i16::from_le_bytes([c[0], c[1]]) as i32).to_le_bytes())
            .collect(),
        T::Uint16 => raw
            .chunks_exact(2)
            .flat_map(|c| (u16::from_le_bytes([c[0], c[1]]) as i32).to_le_bytes())
            .collect(),
        T::Uint32 => raw
            .chunks_exact(4)
            .flat_map(|c| (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).to_le_bytes())
            .collect(),
        T::Uint64 => {
            let mut b = Vec::with_capacity(raw.len());
            for c in raw.chunks_exact(8) {
                let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                b.extend(narrow_u64(v, what)?.to_le_bytes());
            }
            b
        }
        _ => raw.to_vec(),
    };
    HostTensor::new(dtype, shape, bytes)
}

/// Reads `location`/`offset`/`length` external data relative to the model directory, refusing
/// absolute paths and paths that escape the directory.
fn read_external(t: &TensorProto, base_dir: Option<&Path>, what: &str) -> Result<Vec<u8>> {
    let base = base_dir.ok_or_else(|| {
        Error::invalid(
            OP,
            format!("{what} uses external data; load the model from a path, not from bytes"),
        )
    })?;
    let mut location = None;
    let (mut offset, mut length) = (0u64, None);
    for e in &t.external_data {
        let v = e.value.clone().unwrap_or_default();
        let num = || {
            v.parse::<u64>()
                .map_err(|_| Error::invalid(OP, format!("{what}: bad external data number {v:?}")))
        };
        match e.key.as_deref() {
            Some("location") => location = Some(v.clone()),
            Some("offset") => offset = num()?,
            Some("length") => length = Some(num()?),
            _ => {}
        }
    }
    let loc = location
        .ok_or_else(|| Error::invalid(OP, format!("{what}: external data without a location")))?;
    let rel = Path::new(&loc);
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(Error::invalid(
            OP,
            format!("{what}: external data path {loc:?} escapes the model directory"),
        ));
    }
    let path = base.join(rel);
    let io = |e: std::io::Error| {
        Error::io(OP, format!("{what}: cannot read external data {}: {e}", path.display()))
    };
    // Symlinks could still point outside: compare canonical paths.
    let (canon, canon_base) = (path.canonicalize().map_err(io)?, base.canonicalize().map_err(io)?);
    if !canon.starts_with(&canon_base) {
        return Err(Error::invalid(
            OP,
            format!("{what}: external data path {loc:?} escapes the model directory"),
        ));
    }
    let size = std::fs::metadata(&canon).map_err(io)?.len();
    let len = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::io(
            OP,
            format!(
                "{what}: external data range {offset}+{len} is past the end of {} ({size} bytes)",
                path.display()
            ),
        ));
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&canon).map_err(io)?;
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf).map_err(io)?;
    Ok(buf)
}
