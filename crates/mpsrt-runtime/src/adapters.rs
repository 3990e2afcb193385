//! Adapter discovery and the properties we report for a device: name, backend, type, limits,
//! features and total memory (with where that number came from, so nothing is made up).

use mpsrt_core::DType;
use wgpu::{Adapter, Backend, DeviceType};

/// What `mpsrt info` and `mpsrt.mps.get_device_properties()` show for a GPU device.
#[derive(Debug, Clone)]
pub struct DeviceProperties {
    pub index: usize,
    pub name: String,
    /// "Metal", "Vulkan", "DX12", "GL".
    pub backend: String,
    /// "discrete", "integrated", "virtual", "cpu" (software emulation such as lavapipe), "other".
    pub device_type: String,
    pub driver: String,
    pub vendor_id: u32,
    pub device_id: u32,
    /// Bytes of memory available to this device.
    pub total_memory: u64,
    /// Where `total_memory` came from (device heaps, system RAM for unified memory, ...).
    pub total_memory_source: String,
    /// CPU and GPU share memory (Apple Silicon, integrated GPUs, software rasterizers).
    pub unified_memory: bool,
    pub shader_f16: bool,
    pub subgroups: bool,
    /// `subgroupBarrier()` is available (`Features::SUBGROUP_BARRIER`; the cooperative GEMM's
    /// `sb1` store needs it).
    pub subgroup_barrier: bool,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    /// Byte alignment of a storage-buffer binding's offset (windows into large buffers).
    pub min_storage_buffer_offset_alignment: u32,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_storage_size: u32,
    /// Cooperative-matrix (tensor core / simdgroup matrix) configurations the device was opened
    /// with (`EXPERIMENTAL_COOPERATIVE_MATRIX`); empty when the adapter has none or it was not
    /// requested (`MPSRT_COOP_MATMUL=0`).
    pub coop_matrix: Vec<CoopMatrixConfig>,
}

/// One cooperative-matrix configuration: `C[m×n] += A[m×k] · B[k×n]` over one subgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopMatrixConfig {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Element type of A and B.
    pub ab: DType,
    /// Element type of the accumulator C and the result.
    pub cr: DType,
}

impl std::fmt::Display for CoopMatrixConfig {
    /// `16x16x16 f16->f32`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |t: DType| match t {
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            _ => "?",
        };
        write!(f, "{}x{}x{} {}->{}", self.m, self.n, self.k, short(self.ab), short(self.cr))
    }
}

/// The adapter's configurations in mpsrt's dtypes (u32 ones, which mpsrt has no dtype for and
/// no kernel uses, are left out).
pub(crate) fn coop_configs(adapter: &Adapter) -> Vec<CoopMatrixConfig> {
    use wgpu::CooperativeScalarType as T;
    let dt = |t: T| match t {
        T::F32 => Some(DType::F32),
        T::F16 => Some(DType::F16),
        T::I32 => Some(DType::I32),
        T::U32 => None,
    };
    adapter
        .cooperative_matrix_properties()
        .into_iter()
        .filter_map(|c| {
            Some(CoopMatrixConfig {
                m: c.m_size,
                n: c.n_size,
                k: c.k_size,
                ab: dt(c.ab_type)?,
                cr: dt(c.cr_type)?,
            })
        })
        .collect()
}

impl DeviceProperties {
    /// `"NVIDIA H100 (Vulkan)"`, `"llvmpipe (Vulkan, CPU emulation)"`.
    pub fn display_name(&self) -> String {
        if self.device_type == "cpu" {
            format!("{} ({}, CPU emulation)", self.name, self.backend)
        } else {
            format!("{} ({})", self.name, self.backend)
        }
    }
}

/// A one-line view of an adapter found on the system, before a device is opened.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
}

pub(crate) fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Metal => "Metal",
        Backend::Vulkan => "Vulkan",
        Backend::Dx12 => "DX12",
        Backend::Gl => "GL",
        Backend::BrowserWebGpu => "WebGPU",
        Backend::Noop => "Noop",
    }
}

pub(crate) fn type_name(t: DeviceType) -> &'static str {
    match t {
        DeviceType::DiscreteGpu => "discrete",
        DeviceType::IntegratedGpu => "integrated",
        DeviceType::VirtualGpu => "virtual",
        DeviceType::Cpu => "cpu",
        DeviceType::Other => "other",
    }
}

/// Lower ranks first: discrete GPUs, then integrated, virtual, other, and CPU emulation last.
fn perf_rank(t: DeviceType) -> u8 {
    match t {
        DeviceType::DiscreteGpu => 0,
        DeviceType::IntegratedGpu => 1,
        DeviceType::VirtualGpu => 2,
        DeviceType::Other => 3,
        DeviceType::Cpu => 4,
    }
}

/// All usable adapters, high-performance first, filtered by `MPSRT_ADAPTER` (name substring,
/// case-insensitive). GL adapters are skipped unless the user selects them with `WGPU_BACKEND`,
/// because GL compute lacks features we rely on and duplicates the Vulkan adapters.
pub(crate) fn discover(instance: &wgpu::Instance) -> Vec<Adapter> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
    let mut adapters: Vec<Adapter> = pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .filter(|a| {
            a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
        })
        .collect();
    if let Ok(filter) = std::env::var("MPSRT_ADAPTER") {
        let f = filter.to_lowercase();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&f));
    }
    adapters.sort_by_key(|a| perf_rank(a.get_info().device_type));
    adapters
}

/// Total system RAM in bytes, or 0 if the platform will not say (reported as such, not guessed).
pub(crate) fn system_memory() -> u64 {
    match sysinfo::System::new() {
        Ok(mut sys) => {
            sys.refresh_memory();
            sys.total_memory()
        }
        Err(_) => 0,
    }
}

/// Sum of the device-local Vulkan heaps, read through wgpu-hal (wgpu itself does not expose it).
#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
fn vulkan_device_local_bytes(adapter: &Adapter) -> Option<u64> {
    // SAFETY: we only read immutable physical-device properties through the raw handles; the
    // hal adapter outlives this call because we hold `adapter`.
    unsafe {
        let hal = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        const DEVICE_LOCAL_BIT: u32 = 0x1; // VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
        let n = props.memory_heap_count as usize;
        let total: u64 = props.memory_heaps[..n]
            .iter()
            .filter(|h| h.flags.as_raw() & DEVICE_LOCAL_BIT != 0)
            .map(|h| h.size)
            .sum();
        (total > 0).then_some(total)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
fn vulkan_device_local_bytes(_adapter: &Adapter) -> Option<u64> {
    None
}

pub(crate) fn properties(
    index: usize,
    adapter: &Adapter,
    device: &wgpu::Device,
) -> DeviceProperties {
    let info = adapter.get_info();
    let limits = device.limits();
    let features = device.features();
    let unified = matches!(info.device_type, DeviceType::IntegratedGpu | DeviceType::Cpu)
        || info.backend == Backend::Metal;
    let (total_memory, total_memory_source) = if unified {
        (system_memory(), "system RAM (unified memory)".to_string())
    } else if let Some(bytes) =
        (info.backend == Backend::Vulkan).then(|| vulkan_device_local_bytes(adapter)).flatten()
    {
        (bytes, "Vulkan device-local heaps".to_string())
    } else {
        // wgpu exposes no VRAM size on this backend: the adapter's max buffer size is the largest
        // allocation it promises, a lower bound we can defend, rather than a guessed constant.
        (
            limits.max_buffer_size,
            "estimate: adapter max_buffer_size (VRAM size not exposed)".to_string(),
        )
    };
    DeviceProperties {
        index,
        name: info.name.clone(),
        backend: backend_name(info.backend).to_string(),
        device_type: type_name(info.device_type).to_string(),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        vendor_id: info.vendor,
        device_id: info.device,
        total_memory,
        total_memory_source,
        unified_memory: unified,
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        subgroups: features.contains(wgpu::Features::SUBGROUP),
        subgroup_barrier: features.contains(wgpu::Features::SUBGROUP_BARRIER),
        subgroup_min_size: info.subgroup_min_size,
        subgroup_max_size: info.subgroup_max_size,
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
        max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
        max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
        max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
        max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
        coop_matrix: if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            coop_configs(adapter)
        } else {
            Vec::new()
        },
    }
}
