//! `.npy`/`.npz` files ↔ tensors for `mpsrt run` (through the `npyz` crate).

use mpsrt::{DType, Error, Place, Result, Tensor};
use npyz::WriterBuilder;
use std::io::Read;
use std::path::Path;

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::io("npy", format!("{}: {e}", path.display()))
}

/// Reads one array from a `.npy` reader into a CPU tensor.
fn read_array<R: Read>(file: npyz::NpyFile<R>, what: &str) -> Result<Tensor> {
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
        let file = npyz::NpyFile::new(&bytes[..]).map_err(|e| io_err(path, e))?;
        return Ok(vec![(None, read_array(file, &path.display().to_string())?)]);
    }
    let mut npz = npyz::npz::NpzArchive::open(path).map_err(|e| io_err(path, e))?;
    let names: Vec<String> = npz.array_names().map(|s| s.to_string()).collect();
    let mut out = Vec::new();
    for name in names {
        let file = npz
            .by_name(&name)
            .map_err(|e| io_err(path, e))?
            .ok_or_else(|| io_err(path, format!("array {name} vanished")))?;
        out.push((Some(name.clone()), read_array(file, &name)?));
    }
    Ok(out)
}

/// Writes named tensors into a `.npz` file (uncompressed, like `numpy.savez`).
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let mut npz = npyz::npz::NpzWriter::create(path).map_err(|e| io_err(path, e))?;
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
