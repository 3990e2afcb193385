//! Compiled compute pipelines, cached by (source hash, entry point). Callers put any
//! specialization into the WGSL text itself, so the source hash covers it (invariant 5).
//!
//! Bind group layouts are explicit where the shader allows: the group-0 buffers the entry point
//! uses are read from the WGSL with naga, and kernels with the same binding signature (e.g. every
//! two-input elementwise kernel) share one layout whose metadata uniform takes a dynamic
//! offset. A bind group then depends only on the buffers, not on the kernel or on where this
//! dispatch's metadata landed in the arena, so `bind_cache` can reuse it across dispatches and
//! kernels. Shaders outside that shape keep wgpu's derived layout.

use crate::device::GpuDevice;
use mpsrt_core::{Error, Result};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wgpu::naga;

/// A WGSL kernel to compile: source text and entry point.
#[derive(Debug, Clone, Copy)]
pub struct Kernel<'a> {
    pub source: &'a str,
    pub entry: &'a str,
}

/// A compiled compute pipeline and the bind group layout it expects. Cloning shares the
/// compiled objects (wgpu handles are reference-counted) and keeps the ids.
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) key: u64,
    /// Identifies `layout` among the device's layouts: pipelines with equal ids accept the same
    /// bind groups (a bind-group cache key, and the pass skips rebinding between them).
    pub(crate) layout_id: u64,
    /// Whether the metadata uniform is bound with a dynamic offset (explicit layout).
    pub(crate) dynamic_meta: bool,
    /// Unique per compiled pipeline: the pass skips `set_pipeline` when it is already set.
    pub(crate) id: u64,
    /// The WGSL, entry point and whether wgpu's runtime checks are on: a native replay
    /// (`replay/native.rs`) compiles the same kernel again for its own Vulkan pipeline.
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) source: Arc<str>,
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) entry: Arc<str>,
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) checked: bool,
}

impl Pipeline {
    /// The cache key (hash of source and entry point).
    pub fn key(&self) -> u64 {
        self.key
    }
}

/// Ids for pipelines and layouts; one sequence, so the two never need to be told apart.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn cache_key(k: &Kernel<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    k.source.hash(&mut h);
    k.entry.hash(&mut h);
    h.finish()
}

/// How one group-0 binding is declared by the shader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Read,
    ReadWrite,
    /// The metadata block; bound with a dynamic offset into the batch's arena.
    Uniform,
}

/// A bind group layout shared by every pipeline with the same binding signature.
pub(crate) struct SharedLayout {
    pub id: u64,
    pub group: wgpu::BindGroupLayout,
    pub pipeline: wgpu::PipelineLayout,
}

/// The buffers of group 0 that `entry` uses, by binding number, if they are storage buffers at
/// 0..n optionally followed by one uniform at n — the shape `GpuDevice::dispatch` binds.
/// `None` (any other shape, or WGSL naga cannot read) keeps wgpu's derived layout; a genuine
/// error in the source is then reported by wgpu itself.
fn reflect(kernel: &Kernel<'_>) -> Option<Vec<Slot>> {
    let module = naga::front::wgsl::parse_str(kernel.source).ok()?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .ok()?;
    let ep = module
        .entry_points
        .iter()
        .position(|e| e.name == kernel.entry && e.stage == naga::ShaderStage::Compute)?;
    let uses = info.get_entry_point(ep);
    let mut slots: Vec<Option<Slot>> = Vec::new();
    for (handle, var) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        let Some(binding) = &var.binding else { continue };
        if binding.group != 0 {
            return None;
        }
        let slot = match var.space {
            naga::AddressSpace::Uniform => Slot::Uniform,
            naga::AddressSpace::Storage { access } if access == naga::StorageAccess::LOAD => {
                Slot::Read
            }
            naga::AddressSpace::Storage { access }
                if access.contains(naga::StorageAccess::STORE) =>
            {
                Slot::ReadWrite
            }
            _ => return None,
        };
        let i = binding.binding as usize;
        if i >= 64 {
            return None;
        }
        if slots.len() <= i {
            slots.resize(i + 1, None);
        }
        slots[i] = Some(slot);
    }
    let slots: Vec<Slot> = slots.into_iter().collect::<Option<_>>()?;
    let uniforms = slots.iter().filter(|&&s| s == Slot::Uniform).count();
    let uniform_last = slots.last() == Some(&Slot::Uniform);
    (uniforms == 0 || (uniforms == 1 && uniform_last)).then_some(slots)
}

impl GpuDevice {
    /// Compile (or fetch from the cache) a WGSL kernel. Invalid WGSL is an error, not a panic.
    /// wgpu's runtime bounds checks stay on, so any kernel (user WGSL, JIT output) is memory-safe.
    pub fn pipeline(&self, kernel: Kernel<'_>) -> Result<Arc<Pipeline>> {
        self.pipeline_impl(kernel, true)
    }

    /// [`pipeline`](Self::pipeline) for a kernel whose source and entry point are `'static`
    /// (the hand-written `.wgsl` files): found by address, without hashing the source on every
    /// dispatch (a few µs per call for an 8 KB file).
    pub fn static_pipeline(
        &self,
        source: &'static str,
        entry: &'static str,
    ) -> Result<Arc<Pipeline>> {
        let key = (source.as_ptr() as usize, source.len(), entry.as_ptr() as usize);
        if let Some(p) = self.static_pipelines.lock().get(&key) {
            return Ok(p.clone());
        }
        let p = self.pipeline(Kernel { source, entry })?;
        self.static_pipelines.lock().insert(key, p.clone());
        Ok(p)
    }

    /// Like [`pipeline`](Self::pipeline) but without wgpu's per-access bounds checks, for
    /// generated kernels that are in bounds by construction (a measurable win on streaming
    /// kernels).
    ///
    /// # Safety
    /// Every storage access of the kernel must be in bounds for every dispatch it is used in.
    pub unsafe fn pipeline_unchecked(&self, kernel: Kernel<'_>) -> Result<Arc<Pipeline>> {
        self.pipeline_impl(kernel, false)
    }

    /// Number of pipelines compiled so far.
    pub fn pipeline_count(&self) -> usize {
        self.pipelines.lock().len()
    }

    /// The shared layout for a binding signature, created on first use.
    fn shared_layout(&self, slots: Vec<Slot>) -> Arc<SharedLayout> {
        let mut layouts = self.layouts.lock();
        if let Some(l) = layouts.get(&slots) {
            return l.clone();
        }
        let entries: Vec<wgpu::BindGroupLayoutEntry> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: match s {
                        Slot::Read => wgpu::BufferBindingType::Storage { read_only: true },
                        Slot::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                        Slot::Uniform => wgpu::BufferBindingType::Uniform,
                    },
                    has_dynamic_offset: *s == Slot::Uniform,
                    // Sizes are checked against the shader at dispatch, as for derived layouts;
                    // leaving them out lets kernels with different struct sizes share a layout.
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let group = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("mpsrt shared layout"),
            entries: &entries,
        });
        let pipeline = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("mpsrt shared layout"),
            bind_group_layouts: &[Some(&group)],
            immediate_size: 0,
        });
        let l = Arc::new(SharedLayout { id: next_id(), group, pipeline });
        layouts.insert(slots, l.clone());
        l
    }

    fn pipeline_impl(&self, kernel: Kernel<'_>, checked: bool) -> Result<Arc<Pipeline>> {
        let key = cache_key(&kernel) ^ (!checked as u64);
        if let Some(p) = self.pipelines.lock().get(&key) {
            return Ok(p.clone());
        }
        let shared = reflect(&kernel).map(|slots| self.shared_layout(slots));
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(kernel.entry),
            source: wgpu::ShaderSource::Wgsl(kernel.source.into()),
        };
        let module = if checked {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: the caller of `pipeline_unchecked` guarantees in-bounds accesses.
            unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.entry),
            layout: shared.as_ref().map(|l| &l.pipeline),
            module: &module,
            entry_point: Some(kernel.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        let (layout, layout_id, dynamic_meta) = match &shared {
            Some(l) => (l.group.clone(), l.id, true),
            None => (pipeline.get_bind_group_layout(0), next_id(), false),
        };
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::invalid(
                "compile",
                format!("kernel '{}' failed to compile: {e}", kernel.entry),
            ));
        }
        let p = Arc::new(Pipeline {
            pipeline,
            layout,
            key,
            layout_id,
            dynamic_meta,
            id: next_id(),
            source: kernel.source.into(),
            entry: kernel.entry.into(),
            checked,
        });
        self.pipelines.lock().insert(key, p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::{reflect, Kernel, Slot};

    fn slots(source: &str) -> Option<Vec<Slot>> {
        reflect(&Kernel { source, entry: "main" })
    }

    #[test]
    fn reflection_accepts_only_the_dispatch_shape() {
        let ok = "struct M { w: array<vec4<u32>, 1> };
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<uniform> m: M;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < m.w[0][0]) { b[g.x] = a[g.x]; }
}";
        assert_eq!(slots(ok), Some(vec![Slot::Read, Slot::ReadWrite, Slot::Uniform]));
        // A declared but unused binding in the middle: wgpu's derived layout leaves it out, so
        // the positional binding scheme does not apply; keep the derived layout.
        let gap = ok.replace("b[g.x] = a[g.x];", "b[g.x] = 1.0;");
        assert_eq!(slots(&gap), None);
        // The uniform not last, a second group, or unparsable WGSL: derived layout.
        let uniform_first = ok
            .replace("@binding(2) var<uniform>", "@binding(9) var<uniform>")
            .replace("@binding(0) var<storage, read>", "@binding(2) var<storage, read>")
            .replace("@binding(9)", "@binding(0)");
        assert_eq!(slots(&uniform_first), None);
        assert_eq!(slots(&ok.replace("@group(0) @binding(1)", "@group(1) @binding(1)")), None);
        assert_eq!(slots("fn main( {"), None);
        // No uniform at all is fine (kernels without metadata).
        let plain = "@group(0) @binding(0) var<storage, read_write> b: array<u32>;
@compute @workgroup_size(1) fn main() { b[0] = 1u; }";
        assert_eq!(slots(plain), Some(vec![Slot::ReadWrite]));
    }
}
