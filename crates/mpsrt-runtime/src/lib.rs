//! The device seam of mpsrt: the CPU reference device and GPU devices through wgpu.
//!
//! Everything that touches wgpu lives here (ARCHITECTURE.md, invariant 2). The API is small on
//! purpose: allocate, copy in/out, compile a WGSL kernel, dispatch it with buffers and a metadata
//! block, synchronize, and read memory statistics. Op semantics live in `mpsrt-tensor`.

mod adapters;
mod allocator;
mod batch;
mod bind_cache;
mod cpu;
mod device;
mod dispatch;
mod env;
mod pipeline;
mod registry;
mod replay;
mod replay_par;
mod storage;
mod timing;

pub use adapters::{AdapterSummary, CoopMatrixConfig, DeviceProperties};
pub use allocator::MemoryStats;
pub use bind_cache::BindCacheStats;
pub use cpu::{check_host_alloc, cpu_memory_usage, host_vec, set_cpu_memory_limit, CpuBuffer};
pub use device::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, SubmitTiming};
pub use dispatch::{capture_launches, Launch};
pub use env::RuntimeConfig;
pub use registry::{
    available_adapters, current_device, default_place, device_count, gpu_available, gpu_device,
    set_current_device, set_default_place, validate_place,
};
pub use replay::{collapse_heap, hugepages_pass, HugePages, Recording, Suspended};
pub use storage::Storage;
pub use timing::{ticks_to_ns, GpuTimer};
