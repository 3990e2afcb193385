//! HTTP/REST front end: KServe v2 with Triton's extensions (axum).

use crate::config::{parse_json, to_json};
use crate::proto::inference::ModelStatisticsResponse;
use crate::server::{LogSettings, State, EXTENSIONS, SERVER_NAME};
use crate::types::ServeError;
use axum::body::Body;
use axum::extract::{Path, State as AxState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type St = AxState<Arc<State>>;

/// Routes of the HTTP endpoint.
pub fn router(state: Arc<State>) -> Router {
    use crate::http_infer::{infer, infer_v};
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{m}", get(meta))
        .route("/v2/models/{m}/versions/{v}", get(meta_v))
        .route("/v2/models/{m}/ready", get(model_ready))
        .route("/v2/models/{m}/versions/{v}/ready", get(model_ready_v))
        .route("/v2/models/{m}/config", get(config))
        .route("/v2/models/{m}/versions/{v}/config", get(config_v))
        .route("/v2/models/{m}/stats", get(stats))
        .route("/v2/models/{m}/versions/{v}/stats", get(stats_v))
        .route("/v2/models/{m}/infer", post(infer))
        .route("/v2/models/{m}/versions/{v}/infer", post(infer_v))
        .route("/v2/repository/index", post(index))
        .route("/v2/repository/models/{m}/load", post(load))
        .route("/v2/repository/models/{m}/unload", post(unload))
        .route("/v2/logging", get(get_logging).post(post_logging))
        .route("/v2/trace/setting", get(get_trace).post(post_trace))
        .route("/v2/models/{m}/trace/setting", get(get_trace).post(post_trace))
        .fallback(|| async { error_response(&ServeError::not_found("Not Found")) })
        .with_state(state)
}

/// `{"error": "..."}` with Triton's status mapping.
pub fn error_response(e: &ServeError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(json!({ "error": e.message }))).into_response()
}

/// A JSON 200 answer, or the error.
fn reply(r: Result<Value, ServeError>) -> Response {
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error_response(&e),
    }
}

fn status_only(ok: bool) -> Response {
    if ok {
        StatusCode::OK.into_response()
    } else {
        StatusCode::BAD_REQUEST.into_response()
    }
}

/// Request bytes held against the server's in-flight budget until dropped (after the response).
pub struct Charge(#[allow(dead_code)] Option<tokio::sync::OwnedSemaphorePermit>);

impl Charge {
    pub fn none() -> Self {
        Self(None)
    }
}

/// Budget permits are counted in KiB so one acquire covers any body size.
fn kib(n: usize) -> u32 {
    u32::try_from(n.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// Takes `n` more bytes from the in-flight budget, or refuses with 429.
pub fn charge(state: &State, charge: &mut Charge, n: usize) -> Result<(), ServeError> {
    if n == 0 {
        return Ok(());
    }
    let p = state.budget.clone().try_acquire_many_owned(kib(n)).map_err(|_| {
        ServeError::exhausted(format!(
            "the server is already receiving its budget of {} request bytes (--max-inflight-request-bytes); retry later",
            state.options.inflight_budget()
        ))
    })?;
    match &mut charge.0 {
        Some(held) => held.merge(p),
        none => *none = Some(p),
    }
    Ok(())
}

/// How many bytes past `--max-request-bytes` a declared body may have and still be drained
/// before the 413 is sent (see `read_body`).
const DRAIN_BEFORE_413: u64 = 16 << 20;

/// Reads the body up to the limit and undoes `Content-Encoding: gzip|deflate`. A declared
/// `Content-Length` over the limit is answered 413 before reading; the bytes are charged to the
/// in-flight budget (429 when it is spent) and the whole body must arrive within
/// `--request-body-timeout-secs` (408 otherwise).
pub async fn read_body(
    state: &State,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Vec<u8>, Charge), Response> {
    let limit = state.options.max_request_bytes;
    let too_big = || {
        error_response(&ServeError::too_large(format!(
            "request body exceeds the limit of {limit} bytes (--max-request-bytes)"
        )))
    };
    let mut held = Charge(None);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared {
        if n > limit as u64 {
            // A body slightly over the limit is read and discarded first (bounded in bytes and
            // time, never stored): answering before the client has written it makes the client
            // see a broken pipe instead of the 413. Larger declared lengths are refused at once.
            if n <= limit as u64 + DRAIN_BEFORE_413 {
                let secs = state.options.request_body_timeout_secs.max(1);
                let drain = async {
                    use http_body_util::BodyExt;
                    let mut body = body;
                    while let Some(Ok(_)) = body.frame().await {}
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(secs), drain).await;
            }
            return Err(too_big());
        }
        charge(state, &mut held, n as usize).map_err(|e| error_response(&e))?;
    }
    let timeout = std::time::Duration::from_secs(state.options.request_body_timeout_secs.max(1));
    let read = async {
        use http_body_util::BodyExt;
        let mut body = body;
        let mut raw = Vec::with_capacity(declared.map_or(0, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                error_response(&ServeError::invalid(format!(
                    "failed to read the request body: {e}"
                )))
            })?;
            let Ok(chunk) = frame.into_data() else { continue };
            if raw.len() + chunk.len() > limit {
                // Same bounded drain as for a declared length, so the client reads the 413.
                let mut seen = (raw.len() + chunk.len()) as u64;
                drop(raw);
                while seen <= limit as u64 + DRAIN_BEFORE_413 {
                    match body.frame().await {
                        Some(Ok(f)) => seen += f.data_ref().map_or(0, |d| d.len() as u64),
                        _ => break,
                    }
                }
                return Err(too_big());
            }
            if declared.is_none() {
                charge(state, &mut held, chunk.len()).map_err(|e| error_response(&e))?;
            }
            raw.extend_from_slice(&chunk);
        }
        Ok(raw)
    };
    let raw = match tokio::time::timeout(timeout, read).await {
        Ok(r) => r?,
        Err(_) => {
            let mut r = error_response(&ServeError::invalid(format!(
                "the request body did not arrive within {} s (--request-body-timeout-secs)",
                timeout.as_secs()
            )));
            *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
            return Err(r);
        }
    };
    let enc = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let mut out = Vec::new();
    // take(limit + 1) bounds decompression so a small bomb cannot exhaust memory.
    let res = match enc.as_str() {
        "" | "identity" => return Ok((raw, held)),
        "gzip" => {
            flate2::read::GzDecoder::new(&raw[..]).take(limit as u64 + 1).read_to_end(&mut out)
        }
        "deflate" => {
            let r = flate2::read::ZlibDecoder::new(&raw[..])
                .take(limit as u64 + 1)
                .read_to_end(&mut out);
            if r.is_err() {
                out.clear();
                flate2::read::DeflateDecoder::new(&raw[..])
                    .take(limit as u64 + 1)
                    .read_to_end(&mut out)
            } else {
                r
            }
        }
        other => {
            return Err(error_response(&ServeError::unsupported(format!(
                "unsupported Content-Encoding '{other}'"
            ))))
        }
    };
    match res {
        Err(e) => Err(error_response(&ServeError::invalid(format!(
            "failed to decompress {enc} request body: {e}"
        )))),
        Ok(_) if out.len() > limit => Err(too_big()),
        Ok(_) => {
            charge(state, &mut held, out.len()).map_err(|e| error_response(&e))?;
            Ok((out, held))
        }
    }
}

/// Parses a JSON body; an empty body is `{}`.
fn parse_body(bytes: &[u8]) -> Result<Value, ServeError> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(json!({}));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ServeError::invalid(format!("failed to parse the request JSON buffer: {e}")))
}

async fn live(AxState(s): St) -> Response {
    status_only(s.live())
}

async fn ready(AxState(s): St) -> Response {
    status_only(s.ready())
}

async fn server_metadata() -> Response {
    axum::Json(json!({
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
    .into_response()
}

/// Model metadata JSON as Triton prints it.
pub fn metadata_json(s: &State, m: &str, v: &str) -> Result<Value, ServeError> {
    let model = s.manager.get(m, v)?;
    let t = |x: Vec<crate::model::TensorMeta>| -> Vec<Value> {
        x.into_iter()
            .map(|t| json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape}))
            .collect()
    };
    Ok(json!({
        "name": m,
        "versions": s.manager.versions(m),
        "platform": model.config.platform,
        "inputs": t(model.inputs_meta()),
        "outputs": t(model.outputs_meta()),
    }))
}

async fn meta(AxState(s): St, Path(m): Path<String>) -> Response {
    reply(metadata_json(&s, &m, ""))
}

async fn meta_v(AxState(s): St, Path((m, v)): Path<(String, String)>) -> Response {
    reply(metadata_json(&s, &m, &v))
}

async fn model_ready(AxState(s): St, Path(m): Path<String>) -> Response {
    status_only(s.manager.get(&m, "").is_ok())
}

async fn model_ready_v(AxState(s): St, Path((m, v)): Path<(String, String)>) -> Response {
    status_only(s.manager.get(&m, &v).is_ok())
}

fn config_json(s: &State, m: &str, v: &str) -> Result<Value, ServeError> {
    let model = s.manager.get(m, v)?;
    to_json(model.config.as_ref(), "inference.ModelConfig", false)
}

async fn config(AxState(s): St, Path(m): Path<String>) -> Response {
    reply(config_json(&s, &m, ""))
}

async fn config_v(AxState(s): St, Path((m, v)): Path<(String, String)>) -> Response {
    reply(config_json(&s, &m, &v))
}

/// Statistics of all models (`m` empty), one model, or one version.
pub fn stats_message(s: &State, m: &str, v: &str) -> Result<ModelStatisticsResponse, ServeError> {
    let models = if m.is_empty() {
        s.manager.all_ready()
    } else if v.is_empty() {
        s.manager.get(m, "")?;
        s.manager.all_ready().into_iter().filter(|x| x.name == m).collect()
    } else {
        vec![s.manager.get(m, v)?]
    };
    let model_stats = models.iter().map(|x| x.stats.snapshot(&x.name, &x.version_str())).collect();
    Ok(ModelStatisticsResponse { model_stats })
}

fn stats_json(s: &State, m: &str, v: &str) -> Result<Value, ServeError> {
    to_json(&stats_message(s, m, v)?, "inference.ModelStatisticsResponse", false)
}

async fn all_stats(AxState(s): St) -> Response {
    reply(stats_json(&s, "", ""))
}

async fn stats(AxState(s): St, Path(m): Path<String>) -> Response {
    reply(stats_json(&s, &m, ""))
}

async fn stats_v(AxState(s): St, Path((m, v)): Path<(String, String)>) -> Response {
    reply(stats_json(&s, &m, &v))
}

async fn index(AxState(s): St, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _charge) = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let ready_only = match parse_body(&bytes) {
        Ok(v) => v.get("ready").and_then(Value::as_bool).unwrap_or(false),
        Err(e) => return error_response(&e),
    };
    let rows: Vec<Value> = s
        .manager
        .index(ready_only)
        .into_iter()
        .map(|r| {
            let mut o = json!({"name": r.name, "state": r.state});
            if !r.version.is_empty() {
                o["version"] = json!(r.version);
            }
            if !r.reason.is_empty() {
                o["reason"] = json!(r.reason);
            }
            o
        })
        .collect();
    axum::Json(Value::Array(rows)).into_response()
}

async fn load(AxState(s): St, Path(m): Path<String>, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _charge) = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let res = async {
        s.check_explicit()?;
        let v = parse_body(&bytes)?;
        let over = match v.pointer("/parameters/config") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(parse_json(c)?),
            Some(other) => Some(parse_json(&other.to_string())?),
        };
        s.manager.load(&m, over).await
    }
    .await;
    match res {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => error_response(&e),
    }
}

async fn unload(AxState(s): St, Path(m): Path<String>) -> Response {
    let res = async {
        s.check_explicit()?;
        s.manager.unload(&m).await
    }
    .await;
    match res {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => error_response(&e),
    }
}

async fn get_logging(AxState(s): St) -> Response {
    let l = s.log.lock().clone();
    reply(serde_json::to_value(l).map_err(|e| ServeError::internal(e.to_string())))
}

async fn post_logging(AxState(s): St, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _charge) = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let res = parse_body(&bytes).and_then(|v| {
        let mut cur = serde_json::to_value(s.log.lock().clone())
            .map_err(|e| ServeError::internal(e.to_string()))?;
        let Value::Object(upd) = v else {
            return Err(ServeError::invalid("logging settings must be a JSON object"));
        };
        for (k, val) in upd {
            if cur.get(&k).is_none() {
                return Err(ServeError::invalid(format!("unknown logging setting '{k}'")));
            }
            cur[&k] = val;
        }
        let new: LogSettings = serde_json::from_value(cur)
            .map_err(|e| ServeError::invalid(format!("invalid logging setting: {e}")))?;
        s.verbose.store(new.log_verbose_level, Ordering::Relaxed);
        *s.log.lock() = new.clone();
        serde_json::to_value(new).map_err(|e| ServeError::internal(e.to_string()))
    });
    reply(res)
}

fn trace_settings() -> Value {
    json!({
        "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
        "log_frequency": "0", "trace_file": "", "trace_mode": "triton"
    })
}

async fn get_trace() -> Response {
    axum::Json(trace_settings()).into_response()
}

/// Tracing is not implemented: settings that would turn it on are refused, the rest echo back.
async fn post_trace(AxState(s): St, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _charge) = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let res = parse_body(&bytes).and_then(|v| {
        let level_on = v.get("trace_level").is_some_and(|l| {
            l.as_array().is_some_and(|a| a.iter().any(|x| x.as_str() != Some("OFF")))
        });
        if level_on {
            Err(ServeError::unsupported("tracing is not supported by mpsrt"))
        } else {
            Ok(trace_settings())
        }
    });
    reply(res)
}
