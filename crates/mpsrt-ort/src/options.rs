//! Provider options. ORT puts the options a user passes for a plugin EP
//! (`providers=[("MpsrtExecutionProvider", {...})]` or `add_provider_for_devices(devs, {...})`)
//! into the session's config as `ep.<ep name>.<key>`; we read:
//!
//! | key | values | default |
//! |---|---|---|
//! | `device_id` | mpsrt GPU index (`mpsrt.mps.device_count()`), or `cpu` for mpsrt's CPU backend | the selected `OrtEpDevice`'s GPU |
//! | `precision` | `fp32` (the model's own types) or `fp16` (the engine's `precision=f16` pass: heavy ops in float16, softmax/norms/reductions in float32, float32 inputs and outputs kept) | `fp32` |
//! | `fusion` | `1`/`0` (`true`/`false`): elementwise and epilogue fusion in the engine | `1` |
//! | `min_elements` | a group with static shapes and no matmul/conv is claimed only when it produces at least this many elements (the cost model in `capability.rs`); `0` claims every supported group | `65536` |

use crate::abi::OrtSessionOptions;
use crate::ort::{api, cstr, take_message};
use mpsrt_core::Place;
use mpsrt_engine::{Precision, SessionOptions};
use std::ffi::{c_char, CString};

/// Default of `min_elements`: 64 Ki elements, about what ORT's CPU EP streams through in the
/// time of one GPU submission and wait.
pub const DEFAULT_MIN_ELEMENTS: u64 = 1 << 16;

#[derive(Debug, Clone, PartialEq)]
pub struct EpOptions {
    /// `None`: mpsrt's CPU backend; `Some(i)`: GPU `i`.
    pub device: Option<usize>,
    pub fusion: bool,
    /// Cost-model threshold (elements produced by a small static group).
    pub min_elements: u64,
    pub precision: Precision,
}

fn entry(so: *const OrtSessionOptions, key: &str) -> Option<String> {
    if so.is_null() {
        return None;
    }
    let a = api();
    for prefix in ["ep.mpsrtexecutionprovider.", "ep.MpsrtExecutionProvider."] {
        let k = CString::new(format!("{prefix}{key}")).ok()?;
        let mut has = 0i32;
        // SAFETY: per the C API.
        let s = unsafe { a.HasSessionConfigEntry(so, k.as_ptr(), &mut has) };
        if !s.is_null() {
            take_message(s);
            continue;
        }
        if has == 0 {
            continue;
        }
        let mut buf = vec![0 as c_char; 1024];
        let mut size = buf.len();
        // SAFETY: `buf` holds `size` bytes.
        let s = unsafe { a.GetSessionConfigEntry(so, k.as_ptr(), buf.as_mut_ptr(), &mut size) };
        if !s.is_null() {
            take_message(s);
            continue;
        }
        return Some(cstr(buf.as_ptr()));
    }
    None
}

/// Parses `device_id`, `precision` and `fusion`; `picked` is the device our `OrtEpDevice`
/// metadata names (a GPU index or `cpu`).
pub fn parse(
    device_id: Option<&str>,
    precision: Option<&str>,
    fusion: Option<&str>,
    min_elements: Option<&str>,
    picked: &str,
) -> Result<EpOptions, String> {
    let dev_str = device_id.unwrap_or(picked).trim().to_ascii_lowercase();
    let device = match dev_str.as_str() {
        "" => (mpsrt_runtime::device_count() > 0).then_some(0),
        "cpu" => None,
        s => Some(s.parse::<usize>().map_err(|_| {
            format!("provider option device_id={s:?} is not a GPU index (0, 1, ...) or \"cpu\"")
        })?),
    };
    let precision = match precision.map(|p| p.trim().to_ascii_lowercase()).as_deref() {
        None | Some("fp32") | Some("float32") | Some("f32") => Precision::F32,
        Some("fp16") | Some("float16") | Some("f16") => Precision::F16,
        Some(p) => {
            return Err(format!(
                "provider option precision={p:?}: expected \"fp32\" (the model's own types) or \"fp16\""
            ))
        }
    };
    let fusion = match fusion.map(|f| f.trim().to_ascii_lowercase()).as_deref() {
        None | Some("1") | Some("true") | Some("on") => true,
        Some("0") | Some("false") | Some("off") => false,
        Some(f) => return Err(format!("provider option fusion={f:?}: expected 1/0 or true/false")),
    };
    let min_elements = match min_elements.map(str::trim) {
        None => DEFAULT_MIN_ELEMENTS,
        Some(m) => m.parse::<u64>().map_err(|_| {
            format!("provider option min_elements={m:?}: expected a count of elements (0 claims everything)")
        })?,
    };
    Ok(EpOptions { device, fusion, min_elements, precision })
}

impl EpOptions {
    pub fn from_session(so: *const OrtSessionOptions, picked: &str) -> Result<EpOptions, String> {
        parse(
            entry(so, "device_id").as_deref(),
            entry(so, "precision").as_deref(),
            entry(so, "fusion").as_deref(),
            entry(so, "min_elements").as_deref(),
            picked,
        )
    }

    /// The place sessions run on (checked against the GPUs that exist).
    pub fn place(&self) -> Result<Place, String> {
        let p = self.device.map_or(Place::Cpu, Place::Gpu);
        mpsrt_runtime::validate_place(p).map_err(|e| format!("provider option device_id: {e}"))
    }

    pub fn engine(&self) -> SessionOptions {
        SessionOptions { fusion: self.fusion, ..SessionOptions::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_refuse_with_the_key_named() {
        let o = parse(Some("cpu"), Some("fp32"), Some("0"), Some("0"), "0").unwrap();
        let want =
            EpOptions { device: None, fusion: false, min_elements: 0, precision: Precision::F32 };
        assert_eq!(o, want);
        let o = parse(None, Some("FP16"), None, None, "0").unwrap();
        assert_eq!(o.precision, Precision::F16);
        let o = parse(None, None, None, None, "3").unwrap();
        assert_eq!((o.device, o.min_elements), (Some(3), DEFAULT_MIN_ELEMENTS));
        let e = parse(Some("gpu"), None, None, None, "").unwrap_err();
        assert!(e.contains("device_id=\"gpu\""), "{e}");
        let e = parse(None, Some("int8"), None, None, "").unwrap_err();
        assert!(e.contains("precision=\"int8\""), "{e}");
        let e = parse(None, None, Some("maybe"), None, "").unwrap_err();
        assert!(e.contains("fusion"), "{e}");
        let e = parse(None, None, None, Some("-1"), "").unwrap_err();
        assert!(e.contains("min_elements"), "{e}");
        assert!(parse(Some("99"), None, None, None, "").unwrap().place().is_err());
    }
}
