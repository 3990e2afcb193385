//! HTTP/1.1 side of `mpsrt perf`: one bare hyper client connection per worker, polled in the
//! worker's own task (no spawned connection task, no pool), so a request costs the client one
//! write, one read and no cross-thread wake-ups. Bodies follow KServe v2 with Triton's binary
//! tensor extension, as `crates/mpsrt-serve/src/http_infer.rs` decodes and encodes them.

use super::{Dur, Input, ModelMeta, Reply, ServerStats, Target, TensorMeta};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use mpsrt::{Error, Result};
use serde_json::{json, Value};
use std::pin::Pin;
use std::time::Duration;
use tokio::net::TcpStream;

/// The header that carries the JSON part's length when binary tensor data follows it.
const HEADER_LEN: &str = "inference-header-content-length";

/// Time allowed to connect and to answer a metadata or statistics request.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

type Connection = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// One kept-alive HTTP/1.1 connection.
pub struct HttpConn {
    authority: String,
    sender: http1::SendRequest<Full<Bytes>>,
    conn: Pin<Box<Connection>>,
    /// The connection future has finished; it must not be polled again.
    closed: bool,
}

/// A fully formed inference request body and its headers, shared by all workers.
pub struct InferBody {
    path: String,
    content_type: &'static str,
    header_len: Option<usize>,
    body: Bytes,
}

/// Percent-encodes a path segment (model names and versions are user input).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `/v2/models/{m}[/versions/{v}]`.
fn model_path(t: &Target) -> String {
    let mut p = format!("/v2/models/{}", segment(&t.model));
    if !t.version.is_empty() {
        p.push_str(&format!("/versions/{}", segment(&t.version)));
    }
    p
}

/// The `"error"` of a Triton error body, else the body's start.
fn error_text(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned())
}

impl InferBody {
    /// Binary: JSON header with `binary_data_size` per input + the raw tensors, outputs asked
    /// as binary too. JSON: `data` arrays both ways.
    pub fn new(t: &Target, inputs: &[Input], binary: bool) -> Result<InferBody> {
        let path = format!("{}/infer", model_path(t));
        let spec = |i: &Input, extra: (&str, Value)| {
            let mut v = json!({"name": i.name, "shape": i.shape, "datatype": i.datatype.as_str()});
            v[extra.0] = extra.1;
            v
        };
        let err = |e: serde_json::Error| Error::invalid("perf", format!("request JSON: {e}"));
        if binary {
            let ins: Vec<Value> = inputs
                .iter()
                .map(|i| spec(i, ("parameters", json!({"binary_data_size": i.raw.len()}))))
                .collect();
            let header = serde_json::to_vec(
                &json!({"inputs": ins, "parameters": {"binary_data_output": true}}),
            )
            .map_err(err)?;
            let mut body = header.clone();
            for i in inputs {
                body.extend_from_slice(&i.raw);
            }
            Ok(InferBody {
                path,
                content_type: "application/octet-stream",
                header_len: Some(header.len()),
                body: body.into(),
            })
        } else {
            let ins: Vec<Value> =
                inputs.iter().map(|i| spec(i, ("data", Value::Array(i.json.clone())))).collect();
            let body = serde_json::to_vec(&json!({ "inputs": ins })).map_err(err)?;
            Ok(InferBody {
                path,
                content_type: "application/json",
                header_len: None,
                body: body.into(),
            })
        }
    }
}

impl HttpConn {
    pub async fn connect(t: &Target) -> std::result::Result<HttpConn, String> {
        let hint = || format!("cannot connect to {} (-u {}): ", t.addr, t.given);
        let stream = tokio::time::timeout(CONTROL_TIMEOUT, TcpStream::connect(t.addr))
            .await
            .map_err(|_| format!("{}timed out after {CONTROL_TIMEOUT:?}", hint()))?
            .map_err(|e| {
                format!(
                    "{}{e}; is `mpsrt serve` running with --http-port {}?",
                    hint(),
                    t.addr.port()
                )
            })?;
        // Requests are small and latency-bound: never let Nagle hold a segment back.
        stream.set_nodelay(true).map_err(|e| format!("{}set TCP_NODELAY: {e}", hint()))?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{}HTTP handshake: {e}", hint()))?;
        Ok(HttpConn { authority: t.authority.clone(), sender, conn: Box::pin(conn), closed: false })
    }

    /// Sends one request and reads the whole response, driving the connection in this task.
    async fn request(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> std::result::Result<(u16, Option<usize>, Bytes), String> {
        if self.closed {
            return Err("the server closed the connection".into());
        }
        let HttpConn { sender, conn, closed, .. } = self;
        let exchange = async {
            sender.ready().await?;
            let resp = sender.send_request(req).await?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            let hl =
                parts.headers.get(HEADER_LEN).and_then(|v| v.to_str().ok()?.trim().parse().ok());
            Ok::<_, hyper::Error>((parts.status.as_u16(), hl, body))
        };
        tokio::select! {
            biased;
            r = exchange => r.map_err(|e| format!("HTTP: {e}")),
            r = conn.as_mut() => {
                *closed = true;
                Err(match r {
                    Ok(()) => "the server closed the connection".to_string(),
                    Err(e) => format!("HTTP connection: {e}"),
                })
            }
        }
    }

    fn builder(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        Request::builder().method(method).uri(path).header(header::HOST, &self.authority)
    }

    /// One inference request (the timed operation).
    pub async fn infer(&mut self, b: &InferBody) -> std::result::Result<Reply, String> {
        let mut rb =
            self.builder(Method::POST, &b.path).header(header::CONTENT_TYPE, b.content_type);
        if let Some(n) = b.header_len {
            rb = rb.header(HEADER_LEN, n);
        }
        let req = rb.body(Full::new(b.body.clone())).map_err(|e| format!("request: {e}"))?;
        let (status, header_len, body) = self.request(req).await?;
        Ok(Reply::Http { status, header_len, body })
    }

    /// A GET (or bodiless POST) answered within [`CONTROL_TIMEOUT`].
    async fn control(
        &mut self,
        method: Method,
        path: &str,
    ) -> std::result::Result<(u16, Bytes), String> {
        let req = self
            .builder(method, path)
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("request {path}: {e}"))?;
        match tokio::time::timeout(CONTROL_TIMEOUT, self.request(req)).await {
            Ok(r) => r.map(|(s, _, b)| (s, b)),
            Err(_) => Err(format!("{path}: no answer within {CONTROL_TIMEOUT:?}")),
        }
    }

    /// Model metadata; an unknown model is an error that lists what the repository has.
    pub async fn metadata(&mut self, t: &Target) -> Result<ModelMeta> {
        let path = model_path(t);
        let (status, body) = self
            .control(Method::GET, &path)
            .await
            .map_err(|e| Error::io("perf", format!("GET {path} at {}: {e}", t.given)))?;
        if status != 200 {
            let mut msg = format!(
                "model '{}'{} is not available at {} (GET {path}: HTTP {status}: {})",
                t.model,
                if t.version.is_empty() {
                    String::new()
                } else {
                    format!(" version {}", t.version)
                },
                t.given,
                error_text(&body)
            );
            if let Some(list) = self.repository_models().await {
                msg.push_str(&format!("; the repository has: {list}"));
            }
            return Err(Error::invalid("perf", msg));
        }
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            Error::io("perf", format!("GET {path} at {}: not JSON model metadata: {e}", t.given))
        })?;
        let list = |key: &str| -> Result<Vec<TensorMeta>> {
            let bad = || {
                Error::io("perf", format!("GET {path}: metadata has no valid '{key}' (got {v})"))
            };
            v.get(key)
                .and_then(Value::as_array)
                .ok_or_else(bad)?
                .iter()
                .map(|t| {
                    Some(TensorMeta {
                        name: t.get("name")?.as_str()?.to_string(),
                        datatype: t.get("datatype")?.as_str()?.to_string(),
                        shape: t
                            .get("shape")?
                            .as_array()?
                            .iter()
                            .map(Value::as_i64)
                            .collect::<Option<_>>()?,
                    })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)
        };
        Ok(ModelMeta { inputs: list("inputs")?, outputs: list("outputs")? })
    }

    /// `name (STATE)` of each model in the repository index, best effort.
    async fn repository_models(&mut self) -> Option<String> {
        let (status, body) = self.control(Method::POST, "/v2/repository/index").await.ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&body).ok()?;
        let names: Vec<String> = v
            .as_array()?
            .iter()
            .filter_map(|m| {
                let name = m.get("name")?.as_str()?;
                let state = m.get("state").and_then(Value::as_str).unwrap_or("?");
                Some(format!("{name} ({state})"))
            })
            .collect();
        Some(if names.is_empty() { "no models".into() } else { names.join(", ") })
    }

    /// Cumulative statistics of the model, summed over its versions; `None` if unavailable.
    pub async fn stats(&mut self, t: &Target) -> Option<ServerStats> {
        let (status, body) =
            self.control(Method::GET, &format!("{}/stats", model_path(t))).await.ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&body).ok()?;
        // Triton prints 64-bit counters as numbers; proto3 JSON would quote them. Take both.
        let num = |x: Option<&Value>| -> u64 {
            x.and_then(|x| x.as_u64().or_else(|| x.as_str()?.parse().ok())).unwrap_or(0)
        };
        let mut s = ServerStats::default();
        for m in v.get("model_stats")?.as_array()? {
            let st = m.get("inference_stats")?;
            let add = |d: &mut Dur, key: &str| {
                d.count += num(st.get(key).and_then(|x| x.get("count")));
                d.ns += num(st.get(key).and_then(|x| x.get("ns")));
            };
            add(&mut s.success, "success");
            add(&mut s.queue, "queue");
            add(&mut s.compute_input, "compute_input");
            add(&mut s.compute_infer, "compute_infer");
            add(&mut s.compute_output, "compute_output");
            s.inference_count += num(m.get("inference_count"));
            s.execution_count += num(m.get("execution_count"));
        }
        Some(s)
    }
}

/// A 200 whose JSON part parses, names every expected output, and whose binary parts add up.
pub fn check_infer(
    status: u16,
    header_len: Option<usize>,
    body: &[u8],
    expected: &[TensorMeta],
) -> std::result::Result<(), String> {
    if status != 200 {
        return Err(format!("HTTP {status}: {}", error_text(body)));
    }
    let hl = header_len.unwrap_or(body.len());
    if hl > body.len() {
        return Err(format!("{HEADER_LEN} {hl} exceeds the body size {}", body.len()));
    }
    let v: Value =
        serde_json::from_slice(&body[..hl]).map_err(|e| format!("response JSON: {e}"))?;
    let outs = v.get("outputs").and_then(Value::as_array).ok_or("response has no 'outputs'")?;
    let mut binary_left = body.len() - hl;
    for o in outs {
        let name = o.get("name").and_then(Value::as_str).unwrap_or("?");
        let datatype = o.get("datatype").and_then(Value::as_str).unwrap_or("");
        let shape: Option<Vec<i64>> = o
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_i64).collect());
        let shape = shape.ok_or_else(|| format!("output '{name}' has no valid shape"))?;
        let want = super::wire_bytes(datatype, &shape);
        let size =
            o.get("parameters").and_then(|p| p.get("binary_data_size")).and_then(Value::as_u64);
        if let Some(n) = size {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if want.is_some_and(|w| w != n) || n > binary_left {
                return Err(format!(
                    "output '{name}' {datatype} {shape:?}: binary_data_size {n} does not fit ({binary_left} bytes left)"
                ));
            }
            binary_left -= n;
        } else {
            let data = o.get("data").and_then(Value::as_array);
            let elems: i64 = shape.iter().product();
            if data.map(Vec::len) != usize::try_from(elems).ok() {
                return Err(format!(
                    "output '{name}' {shape:?}: 'data' does not hold {elems} values"
                ));
            }
        }
    }
    if binary_left != 0 {
        return Err(format!("{binary_left} bytes of binary data not claimed by any output"));
    }
    for e in expected {
        if !outs.iter().any(|o| o.get("name").and_then(Value::as_str) == Some(&e.name)) {
            return Err(format!("output '{}' missing from the response", e.name));
        }
    }
    Ok(())
}
