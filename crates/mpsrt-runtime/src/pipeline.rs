//! Compiled compute pipelines, cached by (source hash, entry point). Callers put any
//! specialization into the WGSL text itself, so the source hash covers it (invariant 5).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// A WGSL kernel to compile: source text and entry point.
#[derive(Debug, Clone, Copy)]
pub struct Kernel<'a> {
    pub source: &'a str,
    pub entry: &'a str,
}

/// A compiled compute pipeline and the bind group layout derived from its shader.
pub struct Pipeline {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) key: u64,
}

impl Pipeline {
    /// The cache key (hash of source and entry point).
    pub fn key(&self) -> u64 {
        self.key
    }
}

pub(crate) fn cache_key(k: &Kernel<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    k.source.hash(&mut h);
    k.entry.hash(&mut h);
    h.finish()
}
