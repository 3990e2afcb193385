//! `.npy`/`.npz` files ↔ tensors for `mpsrt run` (through the `npyz` crate).

use mpsrt::{DType, Error, Place, Result, Tensor};
use npyz::WriterBuilder;
use std::io::Read;
use std::path::Path;

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::io("npy", format!("{}: {e}", path.display()))
}

/// Runs an `npyz` header parse, turning a panic into an error: npyz multiplies the header's
/// dims unchecked, which panics in debug builds on shapes like `(2**32, 2**32)` (release builds
/// wrap, and `read_array`'s own checked size refuses the result).
fn guarded<T>(path: &Path, f: impl FnOnce() -> std::io::Result<T>) -> Result<T> {
    // The default hook would print the expected panic with a backtrace; the CLI reads its
    // inputs before any worker thread exists, so the hook is swapped only for this call.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    match r {
        Ok(r) => r.map_err(|e| io_err(path, e)),
        Err(_) => Err(Error::shape(
            "npy",
            format!("{}: the header's shape overflows the address space", path.display()),
        )),
    }
}

/// Reads one array from a `.npy` reader into a CPU tensor. `data_len`: the bytes after the
/// header when known (a `.npy` read into memory). The header's shape is checked before
/// anything is allocated: its byte size must be addressable, fit under the host memory limit
/// and, when known, be present in the file (a header claiming `(4294967296, 4294967296)` over
/// 24 bytes is refused, not read as an empty array).
fn read_array<R: Read>(
    file: npyz::NpyFile<R>,
    what: &str,
    data_len: Option<u64>,
) -> Result<Tensor> {
    if file.order() == npyz::Order::Fortran {
        return Err(Error::unsupported(
            "npy",
            format!("{what}: Fortran-order arrays are not supported"),
        ));
    }
    let shape: Vec<usize> = file.shape().iter().map(|&d| d as usize).collect();
    let npyz::DType::Plain(ts) = file.dtype() else {
        return Err(Error::unsupported(
            "npy",
            format!("{what}: structured arrays are not supported"),
        ));
    };
    let code = ts.to_string();
    let item: usize = code.get(2..).and_then(|s| s.parse().ok()).unwrap_or(1);
    let need = shape
        .iter()
        .try_fold(item, |a, &d| a.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::shape(
                "npy",
                format!(
                    "{what}: the header's shape {shape:?} of {code} overflows the address space"
                ),
            )
        })?;
    if let Some(have) = data_len.filter(|&have| have < need as u64) {
        return Err(Error::shape(
            "npy",
            format!(
                "{what}: the header says shape {shape:?} of {code} ({need} bytes) but the file \
                 holds {have} bytes of data"
            ),
        ));
    }
    mpsrt_runtime::check_host_alloc("npy", need.saturating_mul(2))?;
    let bad = |e: std::io::Error| Error::io("npy", format!("{what}: {e}"));
    macro_rules! load {
        ($t:ty) => {{
            let v: Vec<$t> = file.into_vec().map_err(bad)?;
            Tensor::from_slice(&v, &shape, Place::Cpu)
        }};
    }
    match &code[1..] {
        "f4" => load!(f32),
        "f8" => load!(f64),
        "f2" => load!(half::f16),
        "i4" => load!(i32),
        "i8" => load!(i64),
        "i1" => load!(i8),
        "u1" => load!(u8),
        "b1" => {
            let v: Vec<bool> = file.into_vec().map_err(bad)?;
            Tensor::from_bools(&v, &shape, Place::Cpu)
        }
        other => Err(Error::unsupported(
            "npy",
            format!("{what}: NumPy dtype {other:?} is not supported (use float32/float64/float16/int8/uint8/int32/int64/bool)"),
        )),
    }
}

/// Reads a `.npy` file, or the arrays of a `.npz` file as `(name, tensor)` pairs.
pub fn read(path: &Path) -> Result<Vec<(Option<String>, Tensor)>> {
    let is_npz = path.extension().is_some_and(|e| e == "npz");
    if !is_npz {
        let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
        // The reader is left at the data: what remains of the slice is its length.
        let data_len = guarded(path, || npyz::NpyFile::new(&bytes[..]))?.into_inner();
        let data_len = data_len.len() as u64;
        let file = guarded(path, || npyz::NpyFile::new(&bytes[..]))?;
        return Ok(vec![(None, read_array(file, &path.display().to_string(), Some(data_len))?)]);
    }
    let mut npz = npyz::npz::NpzArchive::open(path).map_err(|e| io_err(path, e))?;
    let names: Vec<String> = npz.array_names().map(|s| s.to_string()).collect();
    let mut out = Vec::new();
    for name in names {
        let file = guarded(path, || npz.by_name(&name))?
            .ok_or_else(|| io_err(path, format!("array {name} vanished")))?;
        out.push((Some(name.clone()), read_array(file, &name, None)?));
    }
    Ok(out)
}

/// Writes named tensors into a `.npz` file (uncompressed, like `numpy.savez`). The archive is
/// built in memory and written with one call: a zip writer over the file finishes the archive
/// in its `Drop`, where a write error (a full disk) could only be printed as a stray debug line.
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let mut bytes = Vec::new();
    write_npz_into(path, arrays, std::io::Cursor::new(&mut bytes))?;
    std::fs::write(path, &bytes).map_err(|e| io_err(path, e))
}

fn write_npz_into(
    path: &Path,
    arrays: &[(String, Tensor)],
    out: std::io::Cursor<&mut Vec<u8>>,
) -> Result<()> {
    let mut npz = npyz::npz::NpzWriter::new(out);
    for (name, t) in arrays {
        let t = t.to(Place::Cpu)?.contiguous()?;
        let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        macro_rules! save {
            ($ty:ty) => {{
                let v: Vec<$ty> = t.to_vec()?;
                let mut w = npz
                    .array::<$ty>(name, Default::default())
                    .map_err(|e| io_err(path, e))?
                    .default_dtype()
                    .shape(&shape)
                    .begin_nd()
                    .map_err(|e| io_err(path, e))?;
                w.extend(v).map_err(|e| io_err(path, e))?;
                w.finish().map_err(|e| io_err(path, e))?;
            }};
        }
        match t.dtype() {
            DType::F32 => save!(f32),
            DType::F64 => save!(f64),
            DType::F16 => save!(half::f16),
            DType::I32 => save!(i32),
            DType::I64 => save!(i64),
            DType::I8 => save!(i8),
            DType::U8 => save!(u8),
            DType::Bool => {
                let v: Vec<bool> = t.to_bytes()?.into_iter().map(|b| b != 0).collect();
                let mut w = npz
                    .array::<bool>(name, Default::default())
                    .map_err(|e| io_err(path, e))?
                    .default_dtype()
                    .shape(&shape)
                    .begin_nd()
                    .map_err(|e| io_err(path, e))?;
                w.extend(v).map_err(|e| io_err(path, e))?;
                w.finish().map_err(|e| io_err(path, e))?;
            }
        }
    }
    Ok(())
}
