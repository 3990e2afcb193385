//! HTTP inference: JSON tensors and Triton's binary tensor data extension, both directions.

use crate::codec;
use crate::http::{error_response, read_body};
use crate::server::State;
use crate::types::{HostTensor, ServeError, TensorData, TritonDType};
use axum::body::Body;
use axum::extract::{Path, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::io::Write;
use std::sync::Arc;

/// Header carrying the JSON part's length when binary data follows it.
pub const HEADER_LEN: &str = "inference-header-content-length";

pub async fn infer(
    AxState(s): AxState<Arc<State>>,
    Path(m): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(s, m, String::new(), headers, body).await
}

pub async fn infer_v(
    AxState(s): AxState<Arc<State>>,
    Path((m, v)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(s, m, v, headers, body).await
}

/// A decoded HTTP request: tensors plus which outputs are wanted, and in what form.
struct Decoded {
    id: Option<Value>,
    inputs: Vec<HostTensor>,
    /// (name, binary) of each requested output; empty = all outputs.
    outputs: Vec<(String, bool)>,
    binary_default: bool,
}

async fn run(s: Arc<State>, m: String, v: String, headers: HeaderMap, body: Body) -> Response {
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let model = match s.manager.get(&m, &v) {
        Ok(x) => x,
        Err(e) => return error_response(&e),
    };
    let decoded = match decode(&headers, &bytes) {
        Ok(d) => d,
        Err(e) => {
            model.stats.record_failure(std::time::Duration::ZERO);
            return error_response(&e);
        }
    };
    let names: Vec<String> = decoded.outputs.iter().map(|(n, _)| n.clone()).collect();
    let verbose = s.verbose.load(std::sync::atomic::Ordering::Relaxed) > 0;
    if verbose {
        tracing::info!(model = %m, version = %model.version, inputs = decoded.inputs.len(), "HTTP infer");
    }
    match model.infer(decoded.inputs, names).await {
        Err(e) => {
            if verbose {
                tracing::info!(model = %m, error = %e.message, "HTTP infer failed");
            }
            error_response(&e)
        }
        Ok(outs) => {
            let binary: Vec<bool> = outs
                .iter()
                .map(|o| {
                    decoded
                        .outputs
                        .iter()
                        .find(|(n, _)| n == &o.name)
                        .map_or(decoded.binary_default, |(_, b)| *b)
                })
                .collect();
            encode(&headers, &m, &model.version_str(), decoded.id, &outs, &binary)
        }
    }
}

fn header_len(headers: &HeaderMap, total: usize) -> Result<usize, ServeError> {
    let Some(h) = headers.get(HEADER_LEN) else { return Ok(total) };
    let n: usize = h
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| ServeError::invalid("invalid Inference-Header-Content-Length header"))?;
    if n > total {
        return Err(ServeError::invalid(format!(
            "Inference-Header-Content-Length {n} exceeds the request body size {total}"
        )));
    }
    Ok(n)
}

fn param<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get("parameters").and_then(|p| p.get(key))
}

fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Decoded, ServeError> {
    let hlen = header_len(headers, body.len())?;
    let req: Value = serde_json::from_slice(&body[..hlen]).map_err(|e| {
        ServeError::invalid(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    if !req.is_object() {
        return Err(ServeError::invalid("inference request must be a JSON object"));
    }
    let mut binary = &body[hlen..];
    let raw_inputs = req
        .get("inputs")
        .and_then(Value::as_array)
        .ok_or_else(|| ServeError::invalid("inference request has no 'inputs' array"))?;
    let mut inputs = Vec::with_capacity(raw_inputs.len());
    for i in raw_inputs {
        let name = i
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ServeError::invalid("input without a 'name'"))?
            .to_string();
        let dt_s = i.get("datatype").and_then(Value::as_str).unwrap_or("");
        let datatype = TritonDType::parse(dt_s).ok_or_else(|| {
            ServeError::invalid(format!("input '{name}' has invalid datatype '{dt_s}'"))
        })?;
        let shape: Vec<i64> = i
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| ServeError::invalid(format!("input '{name}' has no valid 'shape'")))?;
        if param(i, "shared_memory_region").is_some() {
            return Err(ServeError::unsupported(format!(
                "input '{name}': shared memory is not supported by mpsrt"
            )));
        }
        let data = if let Some(sz) = param(i, "binary_data_size") {
            let sz = sz.as_u64().and_then(|x| usize::try_from(x).ok()).ok_or_else(|| {
                ServeError::invalid(format!("input '{name}': invalid binary_data_size"))
            })?;
            if sz > binary.len() {
                return Err(ServeError::invalid(format!(
                    "input '{name}' declares binary_data_size {sz} but only {} bytes of binary data remain",
                    binary.len()
                )));
            }
            let (chunk, rest) = binary.split_at(sz);
            binary = rest;
            codec::from_raw(&name, datatype, chunk)?
        } else {
            let d = i.get("data").ok_or_else(|| {
                ServeError::invalid(format!(
                    "input '{name}' has neither 'data' nor binary_data_size"
                ))
            })?;
            codec::from_json(&name, datatype, d)?
        };
        let n = HostTensor::element_count(&shape).ok_or_else(|| {
            ServeError::invalid(format!("input '{name}' has invalid shape {shape:?}"))
        })?;
        let got = match &data {
            TensorData::Bytes(v) => v.len(),
            TensorData::Raw(b) => b.len() / datatype.size().unwrap_or(1),
        };
        // Binary fixed-size payloads are checked by byte size during validation instead.
        let counted = param(i, "binary_data_size").is_none() || datatype == TritonDType::Bytes;
        if counted && got != n {
            return Err(ServeError::invalid(format!(
                "unexpected number of elements for input '{name}': got {got}, shape {shape:?} needs {n}"
            )));
        }
        inputs.push(HostTensor { name, datatype, shape, data });
    }
    if !binary.is_empty() {
        return Err(ServeError::invalid(format!(
            "unexpected additional input data: {} bytes of binary data were not claimed by any input",
            binary.len()
        )));
    }
    let binary_default =
        param(&req, "binary_data_output").and_then(Value::as_bool).unwrap_or(false);
    let outputs = match req.get("outputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|o| {
                let name = o
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ServeError::invalid("requested output without a 'name'"))?;
                if param(o, "class_count").is_some_and(|c| c.as_u64() != Some(0)) {
                    return Err(ServeError::unsupported(format!(
                        "output '{name}': the classification extension is not supported by mpsrt"
                    )));
                }
                if param(o, "shared_memory_region").is_some() {
                    return Err(ServeError::unsupported(format!(
                        "output '{name}': shared memory is not supported by mpsrt"
                    )));
                }
                let b = param(o, "binary_data").and_then(Value::as_bool).unwrap_or(binary_default);
                Ok((name.to_string(), b))
            })
            .collect::<Result<_, ServeError>>()?,
        Some(_) => return Err(ServeError::invalid("'outputs' must be an array")),
    };
    Ok(Decoded { id: req.get("id").cloned(), inputs, outputs, binary_default })
}

fn encode(
    headers: &HeaderMap,
    model: &str,
    version: &str,
    id: Option<Value>,
    outs: &[HostTensor],
    binary: &[bool],
) -> Response {
    let mut blobs = Vec::new();
    let mut jouts = Vec::with_capacity(outs.len());
    for (o, &bin) in outs.iter().zip(binary) {
        let mut j = Map::new();
        j.insert("name".into(), json!(o.name));
        j.insert("datatype".into(), json!(o.datatype.as_str()));
        j.insert("shape".into(), json!(o.shape));
        if bin {
            let raw = codec::raw_bytes(o);
            j.insert("parameters".into(), json!({ "binary_data_size": raw.len() }));
            blobs.push(raw);
        } else {
            j.insert("data".into(), codec::to_json(o));
        }
        jouts.push(Value::Object(j));
    }
    let mut resp = json!({ "model_name": model, "model_version": version, "outputs": jouts });
    if let Some(id) = id {
        resp["id"] = id;
    }
    let mut body = match serde_json::to_vec(&resp) {
        Ok(b) => b,
        Err(e) => return error_response(&ServeError::internal(format!("response JSON: {e}"))),
    };
    let json_len = body.len();
    let has_binary = !blobs.is_empty();
    for b in blobs {
        body.extend_from_slice(&b);
    }
    let mut h = HeaderMap::new();
    if has_binary {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        h.insert(HEADER_LEN, HeaderValue::from(json_len));
    } else {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let wants_gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.split(';').next().map(str::trim) == Some("gzip")));
    if wants_gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if let Ok(gz) = enc.write_all(&body).and_then(|()| enc.finish()) {
            body = gz;
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
    }
    (StatusCode::OK, h, body).into_response()
}
