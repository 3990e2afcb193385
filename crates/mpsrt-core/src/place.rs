//! Where a tensor lives. `mps` and `gpu` name the same wgpu devices: on a Mac that is Metal,
//! elsewhere Vulkan/DX12/GL. Range checks against the real device count happen in the runtime.

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A device place: the CPU reference backend or GPU adapter `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    Cpu,
    Gpu(usize),
}

impl Place {
    pub fn is_gpu(self) -> bool {
        matches!(self, Place::Gpu(_))
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Cpu => write!(f, "cpu"),
            Place::Gpu(i) => write!(f, "mps:{i}"),
        }
    }
}

impl FromStr for Place {
    type Err = Error;
    /// Accepts `cpu`, `mps`, `mps:N`, `gpu`, `gpu:N` (case-insensitive, surrounding spaces ignored).
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || {
            Error::invalid(
                "place",
                format!(
                    "cannot parse place {s:?}: expected 'cpu', 'mps', 'mps:N', 'gpu' or 'gpu:N'"
                ),
            )
        };
        if t == "cpu" {
            return Ok(Place::Cpu);
        }
        let (kind, idx) = match t.split_once(':') {
            Some((k, i)) => (k, Some(i)),
            None => (t.as_str(), None),
        };
        if kind != "mps" && kind != "gpu" {
            return Err(bad());
        }
        match idx {
            None => Ok(Place::Gpu(0)),
            Some(i) => i.parse::<usize>().map(Place::Gpu).map_err(|_| bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let ok = [
            ("cpu", Place::Cpu),
            ("CPU", Place::Cpu),
            ("mps", Place::Gpu(0)),
            ("mps:1", Place::Gpu(1)),
            ("gpu", Place::Gpu(0)),
            (" gpu:3 ", Place::Gpu(3)),
        ];
        for (s, p) in ok {
            assert_eq!(s.parse::<Place>().unwrap(), p, "{s}");
        }
        for s in ["", "cuda", "mps:", "mps:-1", "mps:x", "gpu:1:2", "cpu:0"] {
            let e = s.parse::<Place>().unwrap_err();
            assert!(e.to_string().starts_with("[place]"), "{s}: {e}");
        }
    }
}
