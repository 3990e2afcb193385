//! Bind groups reused across dispatches.
//!
//! Creating a bind group per dispatch was the largest single host cost of a tiny op (~8k
//! instructions in wgpu-core and the driver, plus its destruction after the batch). The caching
//! allocator hands the same buffers back op after op, and pipelines with an explicit layout take
//! the metadata offset dynamically (`pipeline.rs`), so the same (layout, buffers, windows,
//! metadata arena) recurs and its bind group can be reused.
//!
//! Safety of reuse: an entry holds clones of its `wgpu::Buffer`s, so a buffer it names stays
//! alive and its id cannot be reused while the entry exists. To keep memory statistics honest
//! (a cached bind group would otherwise keep an evicted buffer's memory alive), the device
//! clears the cache whenever the allocator releases buffers to the driver (`empty_cache`, pool
//! trimming). The cache is bounded: at `MAX_ENTRIES` it is cleared and refilled.

use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};

/// Most bind groups kept; a model whose plan binds more distinct buffer sets per run than this
/// cycles through the cache (cleared when full) instead of growing it.
pub(crate) const MAX_ENTRIES: usize = 4096;

/// Counters of the bind-group cache (for tests and tuning).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindCacheStats {
    /// Dispatches that reused a cached bind group.
    pub hits: u64,
    /// Dispatches that created one.
    pub misses: u64,
    /// Bind groups currently cached.
    pub entries: usize,
    /// Times the cache was cleared (full, or buffers released to the driver).
    pub clears: u64,
}

/// One storage binding of a key: buffer, offset, size.
pub(crate) type BufferRange = (wgpu::Buffer, u64, u64);

struct Entry {
    layout: u64,
    buffers: Vec<BufferRange>,
    /// Metadata arena and binding size; the offset is dynamic, so not part of the key.
    meta: Option<(wgpu::Buffer, u64)>,
    group: wgpu::BindGroup,
    id: u64,
}

/// A cached bind group found for (or inserted at) a key.
pub(crate) struct Found<'a> {
    pub group: &'a wgpu::BindGroup,
    /// Unique per created bind group (never reused), so "already bound" checks stay exact
    /// across clears.
    pub id: u64,
}

#[derive(Default)]
pub(crate) struct BindCache {
    map: FxHashMap<u64, Vec<Entry>>,
    len: usize,
    next_id: u64,
    stats: BindCacheStats,
}

/// Hash of a key; `buffers` are the storage bindings in order.
pub(crate) fn key_hash<'a>(
    layout: u64,
    buffers: impl Iterator<Item = (&'a wgpu::Buffer, u64, u64)>,
    meta: Option<(&wgpu::Buffer, u64)>,
) -> u64 {
    let mut h = FxHasher::default();
    h.write_u64(layout);
    for (b, o, s) in buffers {
        b.hash(&mut h);
        h.write_u64(o);
        h.write_u64(s);
    }
    if let Some((b, s)) = meta {
        b.hash(&mut h);
        h.write_u64(s);
    }
    h.finish()
}

impl BindCache {
    /// The cached bind group for the key, if any.
    pub(crate) fn get<'a, 'b>(
        &'a mut self,
        hash: u64,
        layout: u64,
        buffers: impl Iterator<Item = (&'b wgpu::Buffer, u64, u64)> + Clone,
        meta: Option<(&wgpu::Buffer, u64)>,
    ) -> Option<Found<'a>> {
        let bucket = self.map.get(&hash)?;
        let e = bucket.iter().find(|e| {
            e.layout == layout
                && e.meta.as_ref().map(|(b, s)| (b, *s)) == meta
                && e.buffers.len() == buffers.clone().count()
                && e.buffers
                    .iter()
                    .zip(buffers.clone())
                    .all(|((b, o, s), (b2, o2, s2))| b == b2 && *o == o2 && *s == s2)
        })?;
        self.stats.hits += 1;
        Some(Found { group: &e.group, id: e.id })
    }

    /// Store a new bind group for the key (clearing the cache first when it is full).
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        layout: u64,
        buffers: Vec<BufferRange>,
        meta: Option<(wgpu::Buffer, u64)>,
        group: wgpu::BindGroup,
    ) -> Found<'_> {
        if self.len >= MAX_ENTRIES {
            self.clear();
        }
        self.stats.misses += 1;
        self.next_id += 1;
        let id = self.next_id;
        self.len += 1;
        let bucket = self.map.entry(hash).or_default();
        bucket.push(Entry { layout, buffers, meta, group, id });
        let e = &bucket[bucket.len() - 1];
        Found { group: &e.group, id }
    }

    /// A fresh id for a bind group that is not cached (kept distinct from cached ones).
    pub(crate) fn uncached_id(&mut self) -> u64 {
        self.stats.misses += 1;
        self.next_id += 1;
        self.next_id
    }

    /// Drop every cached bind group (and with it the cache's references to buffers).
    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.map.clear();
            self.len = 0;
            self.stats.clears += 1;
        }
    }

    pub(crate) fn stats(&self) -> BindCacheStats {
        BindCacheStats { entries: self.len, ..self.stats }
    }
}
