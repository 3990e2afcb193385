//! Process-wide device registry: the wgpu instance, the discovered adapters (opened lazily),
//! the current GPU device and the default place. Honors `MPSRT_DEVICE=cpu|gpu` and
//! `MPSRT_ADAPTER=<name substring>`.

use crate::adapters::{self, AdapterSummary};
use crate::device::GpuDevice;
use crate::env::RuntimeConfig;
use mpsrt_core::{Error, Place, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

struct Registry {
    adapters: Vec<wgpu::Adapter>,
    devices: Vec<OnceLock<std::result::Result<Arc<GpuDevice>, Error>>>,
    /// Why there is no GPU, when there is none.
    why_none: String,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static DEFAULT_PLACE: OnceLock<Mutex<Place>> = OnceLock::new();

fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        let forced_cpu = std::env::var("MPSRT_DEVICE").map(|v| v.trim().eq_ignore_ascii_case("cpu")).unwrap_or(false);
        if forced_cpu {
            return Registry { adapters: vec![], devices: vec![], why_none: "MPSRT_DEVICE=cpu disables the GPU".into() };
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapters = adapters::discover(&instance);
        let why_none = if adapters.is_empty() {
            match std::env::var("MPSRT_ADAPTER") {
                Ok(f) => format!("no GPU adapter matches MPSRT_ADAPTER={f:?}"),
                Err(_) => "no GPU adapter found (on Linux install a Vulkan driver, e.g. mesa-vulkan-drivers)".into(),
            }
        } else {
            String::new()
        };
        let devices = adapters.iter().map(|_| OnceLock::new()).collect();
        Registry { adapters, devices, why_none }
    })
}

/// Number of GPU devices (0 when none is usable or `MPSRT_DEVICE=cpu`).
pub fn device_count() -> usize {
    registry().adapters.len()
}

/// Whether at least one GPU adapter can be used.
pub fn gpu_available() -> bool {
    device_count() > 0
}

/// The adapters found, in device-index order.
pub fn available_adapters() -> Vec<AdapterSummary> {
    registry()
        .adapters
        .iter()
        .map(|a| {
            let i = a.get_info();
            AdapterSummary {
                name: i.name,
                backend: adapters::backend_name(i.backend).to_string(),
                device_type: adapters::type_name(i.device_type).to_string(),
            }
        })
        .collect()
}

/// Check a place against the devices that exist.
pub fn validate_place(place: Place) -> Result<Place> {
    if let Place::Gpu(i) = place {
        let reg = registry();
        if reg.adapters.is_empty() {
            return Err(Error::device(
                "place",
                format!("place '{place}' is not available: {}", reg.why_none),
            ));
        }
        if i >= reg.adapters.len() {
            return Err(Error::invalid(
                "place",
                format!(
                    "place '{place}' is out of range: {} GPU device(s) available (mps:0..mps:{})",
                    reg.adapters.len(),
                    reg.adapters.len() - 1
                ),
            ));
        }
    }
    Ok(place)
}

/// GPU device `index`, opened on first use.
pub fn gpu_device(index: usize) -> Result<Arc<GpuDevice>> {
    validate_place(Place::Gpu(index))?;
    let reg = registry();
    reg.devices[index]
        .get_or_init(|| {
            let config = RuntimeConfig::from_env()?;
            GpuDevice::open(index, &reg.adapters[index], config)
        })
        .clone()
}

/// The current GPU device index (what `mps` without `:N` means).
pub fn current_device() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Select the current GPU device.
pub fn set_current_device(index: usize) -> Result<()> {
    validate_place(Place::Gpu(index))?;
    CURRENT.store(index, Ordering::Relaxed);
    Ok(())
}

fn default_place_cell() -> &'static Mutex<Place> {
    DEFAULT_PLACE.get_or_init(|| {
        let gpu = std::env::var("MPSRT_DEVICE")
            .map(|v| v.trim().eq_ignore_ascii_case("gpu"))
            .unwrap_or(false);
        Mutex::new(if gpu && gpu_available() { Place::Gpu(0) } else { Place::Cpu })
    })
}

/// Where tensors go when no place is given: CPU unless `MPSRT_DEVICE=gpu` or `set_default_place`.
pub fn default_place() -> Place {
    *default_place_cell().lock()
}

pub fn set_default_place(place: Place) -> Result<()> {
    let p = validate_place(place)?;
    *default_place_cell().lock() = p;
    Ok(())
}
