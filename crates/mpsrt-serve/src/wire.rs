//! Request decoding shared by the front ends, public so it can be fuzzed on its own.
//!
//! HTTP JSON tensors are parsed straight into their typed little-endian buffer: the request is
//! deserialized into borrowed structs whose `data` stays raw JSON text (`&RawValue`, no copy),
//! then a serde visitor walks that text once, writing each element into a `Vec<u8>` sized from the
//! declared shape. No `serde_json::Value` tree of the tensor is ever built (a 30M-element array
//! as `Value`s costs ~1 GB; as FP32 bytes it costs 120 MB).

use crate::codec;
use crate::types::{HostTensor, ServeError, TensorData, TritonDType};
use serde::de::{self, DeserializeSeed, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;

/// A decoded HTTP inference request.
#[derive(Debug)]
pub struct HttpRequest {
    pub id: Option<Value>,
    pub inputs: Vec<HostTensor>,
    /// (name, binary) of each requested output; empty = all outputs.
    pub outputs: Vec<(String, bool)>,
    pub binary_default: bool,
}

#[derive(Deserialize)]
struct ReqJson<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow)]
    inputs: Option<Vec<InputJson<'a>>>,
    #[serde(default)]
    outputs: Option<Vec<OutputJson>>,
}

#[derive(Deserialize)]
struct InputJson<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    datatype: Option<String>,
    #[serde(default)]
    shape: Option<Vec<i64>>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OutputJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// The JSON type a known parameter must have.
#[derive(Clone, Copy)]
enum PType {
    Bool,
    Uint,
    Str,
    UintOrStr,
}

/// Known parameters and their types; others pass through unchecked (Triton forwards them).
const REQUEST_PARAMS: &[(&str, PType)] = &[
    ("binary_data_output", PType::Bool),
    ("timeout", PType::Uint),
    ("priority", PType::Uint),
    ("sequence_id", PType::UintOrStr),
    ("sequence_start", PType::Bool),
    ("sequence_end", PType::Bool),
];
const INPUT_PARAMS: &[(&str, PType)] = &[
    ("binary_data_size", PType::Uint),
    ("shared_memory_region", PType::Str),
    ("shared_memory_byte_size", PType::Uint),
    ("shared_memory_offset", PType::Uint),
];
const OUTPUT_PARAMS: &[(&str, PType)] = &[
    ("binary_data", PType::Bool),
    ("class_count", PType::Uint),
    ("shared_memory_region", PType::Str),
    ("shared_memory_byte_size", PType::Uint),
    ("shared_memory_offset", PType::Uint),
];

/// Refuses known parameters of the wrong JSON type (`binary_data_output: "yes"` is a 400, not
/// silently "false").
fn check_params(
    params: Option<&Map<String, Value>>,
    known: &[(&str, PType)],
    whose: &str,
) -> Result<(), ServeError> {
    let Some(params) = params else { return Ok(()) };
    for (key, t) in known {
        let Some(v) = params.get(*key) else { continue };
        let ok = match t {
            PType::Bool => v.is_boolean(),
            PType::Uint => v.is_u64(),
            PType::Str => v.is_string(),
            PType::UintOrStr => v.is_u64() || v.is_string(),
        };
        if !ok {
            let want = match t {
                PType::Bool => "a boolean",
                PType::Uint => "a non-negative integer",
                PType::Str => "a string",
                PType::UintOrStr => "a non-negative integer or a string",
            };
            return Err(ServeError::invalid(format!(
                "{whose}parameter '{key}' must be {want}, got {v}"
            )));
        }
    }
    Ok(())
}

fn json_err(e: serde_json::Error) -> ServeError {
    ServeError::invalid(format!("failed to parse the request JSON buffer: {e}"))
}

/// Decodes an HTTP inference request: `json` is the JSON part, `binary` what follows it
/// (Triton's binary tensor data extension).
pub fn decode_http(json: &[u8], mut binary: &[u8]) -> Result<HttpRequest, ServeError> {
    let req: ReqJson<'_> = serde_json::from_slice(json).map_err(json_err)?;
    check_params(req.parameters.as_ref(), REQUEST_PARAMS, "")?;
    let raw_inputs =
        req.inputs.ok_or_else(|| ServeError::invalid("inference request has no 'inputs' array"))?;
    let mut inputs = Vec::with_capacity(raw_inputs.len());
    for i in raw_inputs {
        let name = i.name.ok_or_else(|| ServeError::invalid("input without a 'name'"))?;
        check_params(i.parameters.as_ref(), INPUT_PARAMS, &format!("input '{name}': "))?;
        let param = |k: &str| i.parameters.as_ref().and_then(|p| p.get(k));
        let dt_s = i.datatype.as_deref().unwrap_or("");
        let datatype = TritonDType::parse(dt_s).ok_or_else(|| {
            ServeError::invalid(format!("input '{name}' has invalid datatype '{dt_s}'"))
        })?;
        let shape = i
            .shape
            .ok_or_else(|| ServeError::invalid(format!("input '{name}' has no valid 'shape'")))?;
        if param("shared_memory_region").is_some() {
            return Err(ServeError::unsupported(format!(
                "input '{name}': shared memory is not supported by mpsrt"
            )));
        }
        let n = HostTensor::element_count(&shape).ok_or_else(|| {
            ServeError::invalid(format!("input '{name}' has invalid shape {shape:?}"))
        })?;
        let binary_size = param("binary_data_size").and_then(Value::as_u64);
        let data = if let Some(sz) = binary_size {
            let sz = usize::try_from(sz).unwrap_or(usize::MAX);
            if sz > binary.len() {
                return Err(ServeError::invalid(format!(
                    "input '{name}' declares binary_data_size {sz} but only {} bytes of binary data remain",
                    binary.len()
                )));
            }
            let (chunk, rest) = binary.split_at(sz);
            binary = rest;
            let d = codec::from_raw(&name, datatype, chunk)?;
            // Fixed-size binary payloads are checked by byte size during validation instead.
            if let TensorData::Bytes(v) = &d {
                if v.len() != n {
                    return Err(ServeError::invalid(format!(
                        "unexpected number of elements for input '{name}': got {}, shape {shape:?} needs {n}",
                        v.len()
                    )));
                }
            }
            d
        } else {
            let raw = i.data.ok_or_else(|| {
                ServeError::invalid(format!(
                    "input '{name}' has neither 'data' nor binary_data_size"
                ))
            })?;
            json_tensor(&name, datatype, &shape, n, raw.get())?
        };
        inputs.push(HostTensor { name, datatype, shape, data });
    }
    if !binary.is_empty() {
        return Err(ServeError::invalid(format!(
            "unexpected additional input data: {} bytes of binary data were not claimed by any input",
            binary.len()
        )));
    }
    let binary_default = req
        .parameters
        .as_ref()
        .and_then(|p| p.get("binary_data_output"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut outputs = Vec::new();
    for o in req.outputs.unwrap_or_default() {
        let name =
            o.name.ok_or_else(|| ServeError::invalid("requested output without a 'name'"))?;
        check_params(o.parameters.as_ref(), OUTPUT_PARAMS, &format!("output '{name}': "))?;
        let param = |k: &str| o.parameters.as_ref().and_then(|p| p.get(k));
        if param("class_count").is_some_and(|c| c.as_u64() != Some(0)) {
            return Err(ServeError::unsupported(format!(
                "output '{name}': the classification extension is not supported by mpsrt"
            )));
        }
        if param("shared_memory_region").is_some() {
            return Err(ServeError::unsupported(format!(
                "output '{name}': shared memory is not supported by mpsrt"
            )));
        }
        let b = param("binary_data").and_then(Value::as_bool).unwrap_or(binary_default);
        outputs.push((name, b));
    }
    Ok(HttpRequest { id: req.id, inputs, outputs, binary_default })
}

/// Decodes a gRPC `ModelInferRequest` into host tensors and the requested output names.
pub fn decode_grpc(
    r: crate::proto::inference::ModelInferRequest,
) -> Result<(Vec<HostTensor>, Vec<String>), ServeError> {
    crate::grpc::decode_request(r)
}

/// Parses one tensor's JSON `data` (nested or flat) straight into its typed buffer.
pub fn json_tensor(
    name: &str,
    dt: TritonDType,
    shape: &[i64],
    n: usize,
    text: &str,
) -> Result<TensorData, ServeError> {
    // Each element takes at least one byte of JSON text, so this never over-reserves wildly.
    let cap = n.min(text.len());
    let mut sink = Sink {
        name,
        dt,
        raw: Vec::with_capacity(cap.saturating_mul(dt.size().unwrap_or(0))),
        strings: Vec::new(),
        count: 0,
        max: n,
        shape,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    Elems(&mut sink).deserialize(&mut de).map_err(|e| {
        let m = e.to_string();
        // The visitor's own messages are complete; serde_json's need the context.
        if m.starts_with("input '") || m.starts_with("unexpected number") {
            ServeError::invalid(m)
        } else {
            ServeError::invalid(format!("input '{name}': invalid 'data': {m}"))
        }
    })?;
    de.end().map_err(json_err)?;
    if sink.count != n {
        return Err(ServeError::invalid(format!(
            "unexpected number of elements for input '{name}': got {}, shape {shape:?} needs {n}",
            sink.count
        )));
    }
    Ok(if dt == TritonDType::Bytes {
        TensorData::Bytes(sink.strings)
    } else {
        TensorData::Raw(sink.raw)
    })
}

struct Sink<'a> {
    name: &'a str,
    dt: TritonDType,
    raw: Vec<u8>,
    strings: Vec<Vec<u8>>,
    count: usize,
    max: usize,
    shape: &'a [i64],
}

enum Scalar<'x> {
    Bool(bool),
    I(i64),
    U(u64),
    F(f64),
    S(&'x str),
}

impl Sink<'_> {
    fn push<E: de::Error>(&mut self, v: Scalar<'_>) -> Result<(), E> {
        if self.count >= self.max {
            return Err(E::custom(format!(
                "unexpected number of elements for input '{}': more than the {} its shape {:?} needs",
                self.name, self.max, self.shape
            )));
        }
        self.count += 1;
        let dt = self.dt;
        let bad = |v: &Scalar<'_>| {
            let shown = match v {
                Scalar::Bool(b) => b.to_string(),
                Scalar::I(i) => i.to_string(),
                Scalar::U(u) => u.to_string(),
                Scalar::F(f) => f.to_string(),
                Scalar::S(s) => format!("{s:?}"),
            };
            E::custom(format!("input '{}': value {shown} is not a valid {dt}", self.name))
        };
        macro_rules! int {
            ($t:ty) => {{
                let x: $t = match v {
                    Scalar::I(i) => <$t>::try_from(i).map_err(|_| bad(&v))?,
                    Scalar::U(u) => <$t>::try_from(u).map_err(|_| bad(&v))?,
                    _ => return Err(bad(&v)),
                };
                self.raw.extend_from_slice(&x.to_le_bytes());
            }};
        }
        let float = |v: &Scalar<'_>| match *v {
            Scalar::I(i) => Ok(i as f64),
            Scalar::U(u) => Ok(u as f64),
            Scalar::F(f) => Ok(f),
            _ => Err(bad(v)),
        };
        match dt {
            TritonDType::Bool => match v {
                Scalar::Bool(b) => self.raw.push(u8::from(b)),
                _ => return Err(bad(&v)),
            },
            TritonDType::Uint8 => int!(u8),
            TritonDType::Uint16 => int!(u16),
            TritonDType::Uint32 => int!(u32),
            TritonDType::Uint64 => int!(u64),
            TritonDType::Int8 => int!(i8),
            TritonDType::Int16 => int!(i16),
            TritonDType::Int32 => int!(i32),
            TritonDType::Int64 => int!(i64),
            TritonDType::Fp16 => {
                self.raw.extend_from_slice(&half::f16::from_f64(float(&v)?).to_le_bytes())
            }
            TritonDType::Bf16 => {
                self.raw.extend_from_slice(&half::bf16::from_f64(float(&v)?).to_le_bytes())
            }
            TritonDType::Fp32 => self.raw.extend_from_slice(&(float(&v)? as f32).to_le_bytes()),
            TritonDType::Fp64 => self.raw.extend_from_slice(&float(&v)?.to_le_bytes()),
            TritonDType::Bytes => match v {
                Scalar::S(s) => self.strings.push(s.as_bytes().to_vec()),
                _ => return Err(bad(&v)),
            },
        }
        Ok(())
    }
}

/// Visits a (possibly nested) JSON array, pushing every scalar into the sink.
struct Elems<'s, 'a>(&'s mut Sink<'a>);

impl<'de> DeserializeSeed<'de> for Elems<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Elems<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of tensor elements")
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Elems(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push(Scalar::I(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push(Scalar::U(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push(Scalar::F(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push(Scalar::S(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(format!("input '{}': value null is not a valid {}", self.0.name, self.0.dt)))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(format!(
            "input '{}': an object is not a valid {}",
            self.0.name, self.0.dt
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_json_matches_the_value_based_reference() {
        use serde_json::json;
        let cases: Vec<(TritonDType, Value, Vec<i64>)> = vec![
            (TritonDType::Bool, json!([true, false]), vec![2]),
            (TritonDType::Int8, json!([[-1], [2]]), vec![2, 1]),
            (TritonDType::Int8, json!([200]), vec![1]),
            (TritonDType::Uint16, json!([258]), vec![1]),
            (TritonDType::Uint32, json!([-1]), vec![1]),
            (TritonDType::Fp16, json!([1.0, 2]), vec![2]),
            (TritonDType::Fp32, json!([[0.5, -3], [1e3, 7]]), vec![2, 2]),
            (TritonDType::Fp64, json!([0.1]), vec![1]),
            (TritonDType::Int64, json!([9007199254740993i64, -5]), vec![2]),
            (TritonDType::Int32, json!(["x"]), vec![1]),
            (TritonDType::Int32, json!([1.5]), vec![1]),
            (TritonDType::Bytes, json!(["a", "bc"]), vec![2]),
            (TritonDType::Bytes, json!([1]), vec![1]),
        ];
        for (dt, data, shape) in cases {
            let n = HostTensor::element_count(&shape).unwrap();
            let want = codec::from_json("t", dt, &data).ok();
            let got = json_tensor("t", dt, &shape, n, &data.to_string()).ok();
            assert_eq!(got, want, "{dt} {data}");
        }
        // Too many elements stops at the first extra one; too few is counted at the end.
        let e = json_tensor("t", TritonDType::Int32, &[2], 2, "[1,2,3]").unwrap_err();
        assert!(e.message.contains("more than the 2"), "{}", e.message);
        let e = json_tensor("t", TritonDType::Int32, &[2], 2, "[1]").unwrap_err();
        assert!(e.message.contains("got 1"), "{}", e.message);
        assert!(json_tensor("t", TritonDType::Int32, &[1], 1, "[null]").is_err());
        assert!(json_tensor("t", TritonDType::Int32, &[1], 1, "[{}]").is_err());
    }

    #[test]
    fn wrong_typed_parameters_are_refused() {
        let body = |p: &str| {
            format!(
                r#"{{"inputs":[{{"name":"a","datatype":"INT32","shape":[1],"data":[1]}}],"parameters":{p}}}"#
            )
        };
        for p in [r#"{"binary_data_output":"yes"}"#, r#"{"timeout":"abc"}"#, r#"{"priority":-1}"#] {
            let e = decode_http(body(p).as_bytes(), &[]).unwrap_err();
            assert!(e.message.contains("parameter"), "{p}: {}", e.message);
        }
        for p in [r#"{"binary_data_output":true}"#, r#"{"timeout":5}"#, r#"{"custom":"x"}"#] {
            decode_http(body(p).as_bytes(), &[]).unwrap();
        }
    }
}
