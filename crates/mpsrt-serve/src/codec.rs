//! Tensor element conversions shared by HTTP JSON, the binary extension and gRPC typed contents.

use crate::types::{HostTensor, ServeError, TensorData, TritonDType};
use serde_json::Value;

/// Parses Triton's binary BYTES layout: each element is a 4-byte little-endian length, then bytes.
pub fn parse_bytes_elements(name: &str, mut b: &[u8]) -> Result<Vec<Vec<u8>>, ServeError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let Some((len, rest)) = b.split_first_chunk::<4>() else {
            return Err(ServeError::invalid(format!(
                "input '{name}': truncated BYTES element length prefix"
            )));
        };
        let n = u32::from_le_bytes(*len) as usize;
        if rest.len() < n {
            return Err(ServeError::invalid(format!(
                "input '{name}': BYTES element of {n} bytes runs past the end of the data"
            )));
        }
        out.push(rest[..n].to_vec());
        b = &rest[n..];
    }
    Ok(out)
}

/// Serializes BYTES elements in Triton's length-prefixed layout.
pub fn serialize_bytes_elements(v: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.iter().map(|e| e.len() + 4).sum());
    for e in v {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// Raw wire bytes of a tensor (BYTES in the length-prefixed layout).
pub fn raw_bytes(t: &HostTensor) -> Vec<u8> {
    match &t.data {
        TensorData::Raw(b) => b.clone(),
        TensorData::Bytes(v) => serialize_bytes_elements(v),
    }
}

/// Builds tensor data from raw wire bytes (binary extension, gRPC raw contents).
pub fn from_raw(name: &str, dt: TritonDType, bytes: &[u8]) -> Result<TensorData, ServeError> {
    if dt == TritonDType::Bytes {
        Ok(TensorData::Bytes(parse_bytes_elements(name, bytes)?))
    } else {
        Ok(TensorData::Raw(bytes.to_vec()))
    }
}

// The `Value`-based conversion below is the reference the typed decoder (`wire`) is tested
// against; requests no longer go through it.
#[cfg(test)]
fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| flatten(x, out)),
        other => out.push(other),
    }
}

#[cfg(test)]
fn bad(name: &str, dt: TritonDType, v: &Value) -> ServeError {
    ServeError::invalid(format!("input '{name}': value {v} is not a valid {dt}"))
}

/// Converts a JSON `data` array (possibly nested) into tensor data of `dt`.
#[cfg(test)]
pub fn from_json(name: &str, dt: TritonDType, data: &Value) -> Result<TensorData, ServeError> {
    let mut vals = Vec::new();
    flatten(data, &mut vals);
    if dt == TritonDType::Bytes {
        let v = vals
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_bytes().to_vec()),
                other => Err(bad(name, dt, other)),
            })
            .collect::<Result<_, _>>()?;
        return Ok(TensorData::Bytes(v));
    }
    let mut out = Vec::with_capacity(vals.len() * dt.size().unwrap_or(1));
    for v in vals {
        let int = || v.as_i64().ok_or_else(|| bad(name, dt, v));
        let uint = || v.as_u64().ok_or_else(|| bad(name, dt, v));
        let float = || v.as_f64().ok_or_else(|| bad(name, dt, v));
        macro_rules! put {
            ($t:ty, $x:expr) => {{
                let x = <$t>::try_from($x).map_err(|_| bad(name, dt, v))?;
                out.extend_from_slice(&x.to_le_bytes());
            }};
        }
        match dt {
            TritonDType::Bool => out.push(u8::from(v.as_bool().ok_or_else(|| bad(name, dt, v))?)),
            TritonDType::Uint8 => put!(u8, uint()?),
            TritonDType::Uint16 => put!(u16, uint()?),
            TritonDType::Uint32 => put!(u32, uint()?),
            TritonDType::Uint64 => put!(u64, uint()?),
            TritonDType::Int8 => put!(i8, int()?),
            TritonDType::Int16 => put!(i16, int()?),
            TritonDType::Int32 => put!(i32, int()?),
            TritonDType::Int64 => put!(i64, int()?),
            TritonDType::Fp16 => {
                out.extend_from_slice(&half::f16::from_f64(float()?).to_le_bytes())
            }
            TritonDType::Bf16 => {
                out.extend_from_slice(&half::bf16::from_f64(float()?).to_le_bytes())
            }
            TritonDType::Fp32 => out.extend_from_slice(&(float()? as f32).to_le_bytes()),
            TritonDType::Fp64 => out.extend_from_slice(&float()?.to_le_bytes()),
            TritonDType::Bytes => {}
        }
    }
    Ok(TensorData::Raw(out))
}

/// Renders tensor data as a flat JSON array (BYTES as strings, lossy for non-UTF-8).
pub fn to_json(t: &HostTensor) -> Value {
    let b = match &t.data {
        TensorData::Bytes(v) => {
            return Value::Array(
                v.iter().map(|e| Value::String(String::from_utf8_lossy(e).into_owned())).collect(),
            )
        }
        TensorData::Raw(b) => b,
    };
    let size = t.datatype.size().unwrap_or(1);
    let vals = b.chunks_exact(size).map(|c| {
        let mut a8 = [0u8; 8];
        a8[..size].copy_from_slice(c);
        let (a1, a2, a4) = ([a8[0]], [a8[0], a8[1]], [a8[0], a8[1], a8[2], a8[3]]);
        match t.datatype {
            TritonDType::Bool => Value::Bool(a8[0] != 0),
            TritonDType::Uint8 => u8::from_le_bytes(a1).into(),
            TritonDType::Uint16 => u16::from_le_bytes(a2).into(),
            TritonDType::Uint32 => u32::from_le_bytes(a4).into(),
            TritonDType::Uint64 => u64::from_le_bytes(a8).into(),
            TritonDType::Int8 => i8::from_le_bytes(a1).into(),
            TritonDType::Int16 => i16::from_le_bytes(a2).into(),
            TritonDType::Int32 => i32::from_le_bytes(a4).into(),
            TritonDType::Int64 => i64::from_le_bytes(a8).into(),
            TritonDType::Fp16 => f64::from(half::f16::from_le_bytes(a2)).into(),
            TritonDType::Bf16 => f64::from(half::bf16::from_le_bytes(a2)).into(),
            TritonDType::Fp32 => f64::from(f32::from_le_bytes(a4)).into(),
            TritonDType::Fp64 => f64::from_le_bytes(a8).into(),
            TritonDType::Bytes => Value::Null,
        }
    });
    Value::Array(vals.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_elements_round_trip_and_reject_truncation() {
        let v = vec![b"".to_vec(), b"abc".to_vec(), vec![0xff; 300]];
        let raw = serialize_bytes_elements(&v);
        assert_eq!(parse_bytes_elements("t", &raw).unwrap(), v);
        for cut in [1, 3, 5, raw.len() - 1] {
            assert!(parse_bytes_elements("t", &raw[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn json_values_convert_per_dtype() {
        use serde_json::json;
        // (dtype, JSON data, expected raw bytes or None for an error)
        let cases: Vec<(TritonDType, serde_json::Value, Option<Vec<u8>>)> = vec![
            (TritonDType::Bool, json!([true, false]), Some(vec![1, 0])),
            (TritonDType::Int8, json!([[-1], [2]]), Some(vec![0xff, 2])),
            (TritonDType::Int8, json!([200]), None),
            (TritonDType::Uint16, json!([258]), Some(vec![2, 1])),
            (TritonDType::Uint32, json!([-1]), None),
            (TritonDType::Fp16, json!([1.0]), Some(vec![0x00, 0x3c])),
            (TritonDType::Fp32, json!([0.5]), Some(0.5f32.to_le_bytes().to_vec())),
            (TritonDType::Int32, json!(["x"]), None),
        ];
        for (dt, data, want) in cases {
            let got = from_json("t", dt, &data).ok().map(|d| match d {
                TensorData::Raw(b) => b,
                TensorData::Bytes(_) => Vec::new(),
            });
            assert_eq!(got, want, "{dt} {data}");
            if let Some(raw) = got {
                let t = HostTensor {
                    name: "t".into(),
                    datatype: dt,
                    shape: vec![],
                    data: TensorData::Raw(raw),
                };
                let flat: Vec<serde_json::Value> = {
                    let mut out = Vec::new();
                    fn flat(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
                        match v {
                            serde_json::Value::Array(a) => a.iter().for_each(|x| flat(x, out)),
                            x => out.push(x.clone()),
                        }
                    }
                    flat(&data, &mut out);
                    out
                };
                assert_eq!(to_json(&t), serde_json::Value::Array(flat), "{dt}");
            }
        }
    }
}
