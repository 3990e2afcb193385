//! Where a tensor's bytes live: host memory or a GPU buffer. Cloning shares the memory.

use crate::{CpuBuffer, GpuBuffer};
use mpsrt_core::Place;
use std::sync::Arc;

#[derive(Clone)]
pub enum Storage {
    Cpu(Arc<CpuBuffer>),
    Gpu(Arc<GpuBuffer>),
}

impl Storage {
    pub fn place(&self) -> Place {
        match self {
            Storage::Cpu(_) => Place::Cpu,
            Storage::Gpu(b) => Place::Gpu(b.device().index()),
        }
    }

    /// Bytes in the underlying allocation.
    pub fn len(&self) -> u64 {
        match self {
            Storage::Cpu(b) => b.len() as u64,
            Storage::Gpu(b) => b.size(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
