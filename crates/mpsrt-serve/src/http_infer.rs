//! HTTP inference: JSON tensors and Triton's binary tensor data extension, both directions.

use crate::codec;
use crate::http::{error_response, read_body};
use crate::server::State;
use crate::types::{HostTensor, ServeError};
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
    let (bytes, _charge) = match read_body(&s, &headers, body).await {
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

fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Decoded, ServeError> {
    let hlen = header_len(headers, body.len())?;
    let r = crate::wire::decode_http(&body[..hlen], &body[hlen..])?;
    Ok(Decoded { id: r.id, inputs: r.inputs, outputs: r.outputs, binary_default: r.binary_default })
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
