//! Native Vulkan replay, device side (issue 22): on a Vulkan adapter a recording's commands are
//! prepared once as Vulkan commands (`native_rec.rs`) and every replay emits them — or executes
//! a secondary command buffer recorded from them — in a wgpu command encoder of its own, so a
//! run costs the host a few Vulkan calls per command instead of wgpu-core's re-encoding of every
//! dispatch (~2–8 µs per command on the H100 hosts, bound by memory latency).
//!
//! wgpu exposes no raw compute pipeline, so this module compiles each kernel's WGSL again with
//! naga's SPIR-V backend, with the options wgpu-hal's Vulkan device uses on this adapter
//! (`wgpu-hal/src/vulkan/adapter.rs` `naga_options`, `device.rs` `compile_stage`): the same
//! SPIR-V version, bounds-check policies (checked kernels: index `Restrict`, buffers `Unchecked`
//! under `robustBufferAccess2`; `pipeline_unchecked` kernels: all `Unchecked`, no loop bounding,
//! no division checks), workgroup-memory zero-initialisation mode, capabilities and
//! `ALLOW_VARYING_SUBGROUP_SIZE`; no pipeline constants (mpsrt specialises in the text). Pipelines
//! and layouts are cached per device and destroyed with it.
//!
//! `MPSRT_REPLAY_NATIVE=0` (or [`GpuDevice::set_replay_native`]) keeps the wgpu replay.

use super::{LayoutKind, Meta};
use crate::device::GpuDevice;
use crate::pipeline::Pipeline;
use ash::vk;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use wgpu::hal::api::Vulkan;
use wgpu::naga;
use wgpu::naga::back::spv;

/// Whether native replays execute pre-recorded secondary command buffers by default. On: on the
/// H100 (tenth session, call 3) emitting the prepared commands into each run's primary cost the
/// host 85-160 µs for ResNet-50's 103 dispatches (up to 3.7 µs per step, p50 1.35-1.47 vs the
/// wgpu replay's 1.34 ms), executing the secondary 10-20 µs. Whole processes that ran 1.7-4.3x
/// slow (DenseNet-121 and ResNet-50 f16 at batch 32) were the driver's cold shader disk cache,
/// whatever the path: with `~/.cache/nvidia` deleted first, ResNet-50 f16 b32 read 17.3 ms on
/// the wgpu replay, 14.4 secondary, 17.1 direct, then 4.0-4.1 on each (lead's verify call).
const DEFAULT_SECONDARY: bool = true;

/// Per-device switch and the lazily opened native side.
pub(crate) struct NativeSlot {
    on: AtomicBool,
    /// Execute each range's pre-recorded secondary command buffer (`MPSRT_REPLAY_NATIVE=
    /// secondary`) instead of emitting its prepared commands into the replay's primary.
    secondary: AtomicBool,
    dev: OnceLock<Option<Arc<NativeDevice>>>,
}

impl NativeSlot {
    pub(crate) fn new() -> Self {
        let v = std::env::var("MPSRT_REPLAY_NATIVE").unwrap_or_default();
        let v = v.trim();
        let on = !(v == "0" || v.eq_ignore_ascii_case("off"));
        let secondary = match v {
            "secondary" => true,
            "direct" => false,
            _ => DEFAULT_SECONDARY,
        };
        NativeSlot {
            on: AtomicBool::new(on),
            secondary: AtomicBool::new(secondary),
            dev: OnceLock::new(),
        }
    }

    pub(crate) fn secondary(&self) -> bool {
        self.secondary.load(Ordering::Relaxed)
    }
}

/// A compiled native pipeline: its handle, layout and which bindings the shader writes.
pub(crate) struct NativePipeline {
    pub raw: vk::Pipeline,
    pub layout: vk::PipelineLayout,
    /// Per storage binding (in binding order): whether the kernel may write it.
    pub writes: Vec<bool>,
}

/// The Vulkan device under a wgpu device, and what native replays share on it.
pub(crate) struct NativeDevice {
    /// Keeps wgpu-core's device (and so the `VkDevice`) alive until our objects are destroyed.
    _wgpu: wgpu::Device,
    pub raw: ash::Device,
    pub family: u32,
    checked: spv::Options<'static>,
    unchecked: spv::Options<'static>,
    varying_subgroup: bool,
    layouts: Mutex<FxHashMap<LayoutKind, (vk::DescriptorSetLayout, vk::PipelineLayout)>>,
    pipelines: Mutex<FxHashMap<(u64, LayoutKind), Arc<NativePipeline>>>,
}

impl std::fmt::Debug for NativeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeDevice").field("family", &self.family).finish()
    }
}

impl GpuDevice {
    /// Turns native Vulkan replay on or off for recordings replayed from now on (it is on by
    /// default on Vulkan adapters; `MPSRT_REPLAY_NATIVE=0` turns it off).
    pub fn set_replay_native(&self, on: bool) {
        self.native.on.store(on, Ordering::Relaxed);
    }

    /// Native replays execute a pre-recorded secondary command buffer per command range
    /// (`true`, the default) or emit the range's prepared commands into each replay's own
    /// command buffer (`false`; `MPSRT_REPLAY_NATIVE=secondary` / `direct`).
    pub fn set_replay_native_secondary(&self, on: bool) {
        self.native.secondary.store(on, Ordering::Relaxed);
    }

    /// Whether replays of this device may run as native Vulkan command buffers: the switch is
    /// on and the adapter is a Vulkan one.
    pub fn replay_native(&self) -> bool {
        self.native.on.load(Ordering::Relaxed) && self.native_device().is_some()
    }

    /// The native side, opened on first use; `None` off Vulkan.
    pub(crate) fn native_device(&self) -> Option<&Arc<NativeDevice>> {
        self.native.dev.get_or_init(|| NativeDevice::open(&self.device)).as_ref()
    }
}

impl NativeDevice {
    fn open(device: &wgpu::Device) -> Option<Arc<NativeDevice>> {
        // SAFETY: the hal device is only read here (handles, extension list, instance); we do
        // not destroy it, and `_wgpu` below keeps it alive as long as this struct.
        let hal = unsafe { device.as_hal::<Vulkan>() }?;
        let raw = hal.raw_device().clone();
        let family = hal.queue_family_index();
        let phd = hal.raw_physical_device();
        let instance = hal.shared_instance().raw_instance();
        let exts = hal.enabled_device_extensions();
        // SAFETY: `phd` is the physical device this instance enumerated for wgpu.
        let props = unsafe { instance.get_physical_device_properties(phd) };
        let api = props.api_version;
        if api < vk::API_VERSION_1_1 {
            return None;
        }
        // The private capabilities wgpu-hal derives from the same feature queries.
        let has_robust2 = exts.contains(&ash::ext::robustness2::NAME);
        let has_zero = api >= vk::API_VERSION_1_3
            || exts.contains(&ash::khr::zero_initialize_workgroup_memory::NAME);
        let has_dot = api >= vk::API_VERSION_1_3
            || exts.contains(&ash::khr::shader_integer_dot_product::NAME);
        let mut robust2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
        let mut zero = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut f16i8 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut f16i8);
        if has_robust2 {
            features = features.push_next(&mut robust2);
        }
        if has_zero {
            features = features.push_next(&mut zero);
        }
        if has_dot {
            features = features.push_next(&mut dot);
        }
        // SAFETY: Vulkan 1.1 (checked above) has vkGetPhysicalDeviceFeatures2; every chained
        // struct is one the device's API version or enabled extensions define.
        unsafe { instance.get_physical_device_features2(phd, &mut features) };
        let robust_buffer_access2 = has_robust2 && robust2.robust_buffer_access2 == vk::TRUE;
        let zero_native = has_zero && zero.shader_zero_initialize_workgroup_memory == vk::TRUE;
        let int_dot = has_dot && dot.shader_integer_dot_product == vk::TRUE;
        let int8 = f16i8.shader_int8 == vk::TRUE;
        let feats = device.features();
        let mut caps = vec![
            spv::Capability::Shader,
            spv::Capability::Matrix,
            spv::Capability::Sampled1D,
            spv::Capability::Image1D,
            spv::Capability::ImageQuery,
            spv::Capability::DerivativeControl,
            spv::Capability::StorageImageExtendedFormats,
        ];
        use wgpu::Features as F;
        if feats.intersects(F::SUBGROUP | F::SUBGROUP_VERTEX) {
            caps.extend([
                spv::Capability::GroupNonUniform,
                spv::Capability::GroupNonUniformVote,
                spv::Capability::GroupNonUniformArithmetic,
                spv::Capability::GroupNonUniformBallot,
                spv::Capability::GroupNonUniformShuffle,
                spv::Capability::GroupNonUniformShuffleRelative,
                spv::Capability::GroupNonUniformQuad,
            ]);
        }
        for (f, c) in [
            (F::SHADER_INT64, spv::Capability::Int64),
            (F::SHADER_F16, spv::Capability::Float16),
            (F::SHADER_I16, spv::Capability::Int16),
            (F::SHADER_FLOAT32_ATOMIC, spv::Capability::AtomicFloat32AddEXT),
        ] {
            if feats.contains(f) {
                caps.push(c);
            }
        }
        if feats.intersects(F::SHADER_INT64_ATOMIC_ALL_OPS | F::SHADER_INT64_ATOMIC_MIN_MAX) {
            caps.push(spv::Capability::Int64Atomics);
        }
        if feats.contains(F::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            caps.extend([
                spv::Capability::CooperativeMatrixKHR,
                spv::Capability::VulkanMemoryModel,
            ]);
        }
        if int_dot {
            caps.extend([
                spv::Capability::DotProductInputAllKHR,
                spv::Capability::DotProductInput4x8BitKHR,
                spv::Capability::DotProductInput4x8BitPackedKHR,
                spv::Capability::DotProductKHR,
            ]);
        }
        if int8 {
            caps.push(spv::Capability::Int8);
        }
        let lang_version = match api {
            a if a < vk::API_VERSION_1_2 => (1, 3),
            a if a < vk::API_VERSION_1_3 => (1, 5),
            _ => (1, 6),
        };
        let restrict = naga::proc::BoundsCheckPolicy::Restrict;
        let unchecked = naga::proc::BoundsCheckPolicy::Unchecked;
        let checked = spv::Options {
            lang_version,
            flags: spv::WriterFlags::LABEL_VARYINGS | spv::WriterFlags::FORCE_POINT_SIZE,
            capabilities: Some(caps.into_iter().collect()),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: restrict,
                buffer: if robust_buffer_access2 { unchecked } else { restrict },
                image_load: restrict,
                binding_array: unchecked,
            },
            zero_initialize_workgroup_memory: if zero_native {
                spv::ZeroInitializeWorkgroupMemoryMode::Native
            } else {
                spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
            },
            force_loop_bounding: true,
            ray_query_initialization_tracking: true,
            use_storage_input_output_16: false,
            // wgpu-hal maps each (group, binding) to its index among the layout's sorted
            // entries; our layouts have bindings 0..n, where that map is the identity.
            fake_missing_bindings: true,
            binding_map: Default::default(),
            debug_info: None,
            task_dispatch_limits: None,
            mesh_shader_primitive_indices_clamp: true,
            trace_ray_argument_validation: true,
            emit_int_div_checks: true,
        };
        // `compile_stage` with `ShaderRuntimeChecks::unchecked()`.
        let mut no_checks = checked.clone();
        no_checks.bounds_check_policies = naga::proc::BoundsCheckPolicies {
            index: unchecked,
            buffer: unchecked,
            image_load: unchecked,
            binding_array: unchecked,
        };
        no_checks.force_loop_bounding = false;
        no_checks.ray_query_initialization_tracking = false;
        no_checks.mesh_shader_primitive_indices_clamp = false;
        no_checks.emit_int_div_checks = false;
        tracing::debug!(robust_buffer_access2, zero_native, int_dot, "native replay available");
        Some(Arc::new(NativeDevice {
            _wgpu: device.clone(),
            raw,
            family,
            checked,
            unchecked: no_checks,
            varying_subgroup: feats.contains(F::SUBGROUP),
            layouts: Mutex::default(),
            pipelines: Mutex::default(),
        }))
    }

    /// The descriptor-set and pipeline layouts for `kind`, created once.
    pub(crate) fn layout(
        &self,
        kind: LayoutKind,
    ) -> Result<(vk::DescriptorSetLayout, vk::PipelineLayout), String> {
        let mut layouts = self.layouts.lock();
        if let Some(l) = layouts.get(&kind) {
            return Ok(*l);
        }
        let mut bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..kind.storage)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        if let Some(ty) = kind.meta.descriptor_type() {
            bindings.push(
                vk::DescriptorSetLayoutBinding::default()
                    .binding(kind.storage)
                    .descriptor_type(ty)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE),
            );
        }
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: a valid create info on our device; the layout is destroyed in `Drop`.
        let set = unsafe { self.raw.create_descriptor_set_layout(&info, None) }
            .map_err(|e| format!("vkCreateDescriptorSetLayout: {e}"))?;
        let sets = [set];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
        // SAFETY: as above; `set` is a live layout of this device.
        let pl = match unsafe { self.raw.create_pipeline_layout(&info, None) } {
            Ok(pl) => pl,
            Err(e) => {
                // SAFETY: `set` was just created and nothing uses it.
                unsafe { self.raw.destroy_descriptor_set_layout(set, None) };
                return Err(format!("vkCreatePipelineLayout: {e}"));
            }
        };
        layouts.insert(kind, (set, pl));
        Ok((set, pl))
    }

    /// The native pipeline of `p` for bind groups of `kind`, compiled once.
    pub(crate) fn pipeline(
        &self,
        p: &Pipeline,
        kind: LayoutKind,
    ) -> Result<Arc<NativePipeline>, String> {
        let key = (p.key, kind);
        if let Some(n) = self.pipelines.lock().get(&key) {
            return Ok(n.clone());
        }
        let (_, layout) = self.layout(kind)?;
        let entry = &*p.entry;
        let module = naga::front::wgsl::parse_str(&p.source)
            .map_err(|e| format!("kernel '{entry}': WGSL: {e}"))?;
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .map_err(|e| format!("kernel '{entry}': validation: {e}"))?;
        let writes = storage_writes(&module, &info, entry, kind.storage);
        let (module, info) = naga::back::pipeline_constants::process_overrides(
            &module,
            &info,
            Some((naga::ShaderStage::Compute, entry)),
            &Default::default(),
        )
        .map_err(|e| format!("kernel '{entry}': overrides: {e}"))?;
        let options = if p.checked { &self.checked } else { &self.unchecked };
        let stage = spv::PipelineOptions {
            entry_point: entry.to_owned(),
            shader_stage: naga::ShaderStage::Compute,
        };
        let words = spv::write_vec(&module, &info, options, Some(&stage))
            .map_err(|e| format!("kernel '{entry}': SPIR-V: {e}"))?;
        let info = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: `words` is SPIR-V naga generated from a validated module.
        let sm = unsafe { self.raw.create_shader_module(&info, None) }
            .map_err(|e| format!("kernel '{entry}': vkCreateShaderModule: {e}"))?;
        let name = std::ffi::CString::new(entry).map_err(|e| format!("entry point: {e}"))?;
        let mut flags = vk::PipelineShaderStageCreateFlags::empty();
        if self.varying_subgroup {
            flags |= vk::PipelineShaderStageCreateFlags::ALLOW_VARYING_SUBGROUP_SIZE;
        }
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .flags(flags)
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(sm)
            .name(&name);
        let create = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout)];
        // SAFETY: module, layout and entry name are live; the pipeline is destroyed in `Drop`.
        let made =
            unsafe { self.raw.create_compute_pipelines(vk::PipelineCache::null(), &create, None) };
        // SAFETY: the module is only needed while the pipeline is created.
        unsafe { self.raw.destroy_shader_module(sm, None) };
        let raw =
            made.map_err(|(_, e)| format!("kernel '{entry}': vkCreateComputePipelines: {e}"))?[0];
        let mut pipelines = self.pipelines.lock();
        if let Some(other) = pipelines.get(&key) {
            // Another thread compiled it meanwhile: keep theirs (it may be recorded already).
            // SAFETY: ours was never recorded into a command buffer.
            unsafe { self.raw.destroy_pipeline(raw, None) };
            return Ok(other.clone());
        }
        let n = Arc::new(NativePipeline { raw, layout, writes });
        pipelines.insert(key, n.clone());
        Ok(n)
    }
}

/// Whether entry point `entry` may write each of the group-0 storage bindings `0..n`: only the
/// globals it uses count (a module's entry points may declare one binding number as different
/// variables, read-only in one and written in another — `copy_strided`'s module does); a
/// binding it does not use, or that naga cannot tell, is treated as written, to be safe.
fn storage_writes(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    n: u32,
) -> Vec<bool> {
    let Some(ep) = module.entry_points.iter().position(|e| e.name == entry) else {
        return vec![true; n as usize];
    };
    let uses = info.get_entry_point(ep);
    let mut writes: Vec<Option<bool>> = vec![None; n as usize];
    for (handle, var) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        let (Some(b), naga::AddressSpace::Storage { access }) = (&var.binding, var.space) else {
            continue;
        };
        if b.group == 0 && b.binding < n {
            let w = &mut writes[b.binding as usize];
            *w = Some(w.unwrap_or(false) || access.contains(naga::StorageAccess::STORE));
        }
    }
    writes.into_iter().map(|w| w.unwrap_or(true)).collect()
}

impl Drop for NativeDevice {
    fn drop(&mut self) {
        // Every recording that used these objects holds the `GpuDevice` (and so this struct)
        // and waits for its last native submission in its own `Drop`: nothing in flight uses
        // them any more.
        for (_, p) in self.pipelines.get_mut().drain() {
            // SAFETY: see above; each pipeline is destroyed once.
            unsafe { self.raw.destroy_pipeline(p.raw, None) };
        }
        for (_, (set, pl)) in self.layouts.get_mut().drain() {
            // SAFETY: as above; the pipelines using these layouts are gone.
            unsafe {
                self.raw.destroy_pipeline_layout(pl, None);
                self.raw.destroy_descriptor_set_layout(set, None);
            }
        }
    }
}

impl Meta {
    fn descriptor_type(self) -> Option<vk::DescriptorType> {
        match self {
            Meta::None => None,
            Meta::Fixed => Some(vk::DescriptorType::UNIFORM_BUFFER),
            Meta::Dynamic => Some(vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::storage_writes;
    use wgpu::naga;

    /// Two entry points declare binding 1 as different variables: read-only in `a`, written in
    /// `b` (as `copy_strided`'s module). Each entry point's writes are its own; a binding the
    /// entry point does not use counts as written.
    #[test]
    fn writes_follow_the_entry_points_own_variables() {
        let src = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> r: array<f32>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@compute @workgroup_size(1) fn a() { let v = x[0] + r[0]; }
@compute @workgroup_size(1) fn b() { w[0] = x[0]; }";
        let module = naga::front::wgsl::parse_str(src).unwrap();
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap();
        assert_eq!(storage_writes(&module, &info, "a", 2), vec![false, false]);
        assert_eq!(storage_writes(&module, &info, "b", 2), vec![false, true]);
        assert_eq!(storage_writes(&module, &info, "b", 3), vec![false, true, true]);
        assert_eq!(storage_writes(&module, &info, "none", 2), vec![true, true]);
    }
}
