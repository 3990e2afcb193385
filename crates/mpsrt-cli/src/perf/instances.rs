//! Per-instance execution counts from the server's Prometheus endpoint (`mpsrt serve`'s
//! `mpsrt_instance_exec_count{model,version,instance,device}`), so a run shows how the load
//! spread over instances and GPUs. Servers without that family (Triton) simply report none.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Executions per (instance, device) of one model, summed over its versions.
pub type Counts = BTreeMap<(String, String), u64>;

/// `GET /metrics` at `addr` (HOST:PORT), parsed for `model`; `None` when unreachable.
pub async fn scrape(addr: &str, model: &str) -> Option<Counts> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut body = Vec::new();
        s.read_to_end(&mut body).await.ok()?;
        Some(String::from_utf8_lossy(&body).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fetch).await.ok()??;
    Some(parse(&text, model))
}

/// The `mpsrt_instance_exec_count` series of `model` in Prometheus text.
pub fn parse(text: &str, model: &str) -> Counts {
    let mut out = Counts::new();
    let want_model = format!("model=\"{model}\"");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("mpsrt_instance_exec_count{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        if !labels.split(',').any(|l| l == want_model) {
            continue;
        }
        let label = |k: &str| {
            labels.split(',').find_map(|l| l.strip_prefix(&format!("{k}=\""))?.strip_suffix('"'))
        };
        let (Some(inst), Some(dev), Ok(v)) =
            (label("instance"), label("device"), value.trim().parse::<u64>())
        else {
            continue;
        };
        *out.entry((inst.to_string(), dev.to_string())).or_default() += v;
    }
    out
}

/// Executions between two scrapes, per instance (instances that ran nothing included).
pub fn since(before: &Counts, after: &Counts) -> Vec<(String, String, u64)> {
    after
        .iter()
        .map(|((i, d), v)| {
            (
                i.clone(),
                d.clone(),
                v.saturating_sub(before.get(&(i.clone(), d.clone())).copied().unwrap_or(0)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_subtracts_instance_series() {
        let t0 = "# TYPE mpsrt_instance_exec_count counter\n\
            mpsrt_instance_exec_count{model=\"m\",version=\"1\",instance=\"m_0\",device=\"mps:0\"} 5\n\
            mpsrt_instance_exec_count{model=\"m\",version=\"1\",instance=\"m_1\",device=\"mps:1\"} 2\n\
            mpsrt_instance_exec_count{model=\"mm\",version=\"1\",instance=\"mm_0\",device=\"cpu\"} 9\n";
        let t1 = t0.replace("} 5", "} 12");
        let (a, b) = (parse(t0, "m"), parse(&t1, "m"));
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(
            since(&a, &b),
            [("m_0".into(), "mps:0".into(), 7), ("m_1".into(), "mps:1".into(), 0)]
        );
        assert!(parse("nv_inference_count{model=\"m\"} 3", "m").is_empty());
    }
}
