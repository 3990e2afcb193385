//! Facade crate: the public Rust API of mpsrt in one place.
//!
//! ```no_run
//! use mpsrt::{DType, Place};
//! let x = mpsrt::randn(&[2, 3], DType::F32, Place::Gpu(0))?;
//! let y = mpsrt::exp(&mpsrt::add(&x, &x)?)?;
//! println!("{:?}", y.to_vec::<f32>()?);
//! # Ok::<(), mpsrt::Error>(())
//! ```

pub use mpsrt_core::{DType, Error, ErrorKind, Layout, Place, Result};
pub use mpsrt_tensor::*;

/// Devices, memory statistics and synchronization.
pub mod device {
    pub use mpsrt_runtime::{
        available_adapters, current_device, default_place, device_count, gpu_available, gpu_device,
        set_current_device, set_default_place, validate_place, DeviceProperties, GpuDevice,
        MemoryStats, RuntimeConfig,
    };
}
