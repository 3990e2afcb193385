//! What a recording keeps for native Vulkan replay on every target (issue 22): the shape of
//! each bind group and the buffers behind it (`replay.rs` fills them while preparing a
//! recording; `native_rec.rs` builds descriptor sets from them), and where wgpu has no Vulkan
//! backend, the switch's no-op stand-ins.

/// How a bind group's metadata uniform is bound (native replay).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Meta {
    None,
    Fixed,
    Dynamic,
}

/// The shape of a bind group for native replay: storage buffers at `0..storage`, then the
/// metadata uniform (if any) at `storage` — the shape `GpuDevice::dispatch` binds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct LayoutKind {
    pub storage: u32,
    pub meta: Meta,
}

/// What a recording's bind group holds, kept for native replay's descriptor sets.
#[cfg_attr(not(native_vk), allow(dead_code))]
pub(crate) struct GroupDesc {
    /// (buffer, offset, size; 0 = to the end) of each storage binding.
    pub storage: Vec<(wgpu::Buffer, u64, u64)>,
    /// Offset (0 when dynamic) and size of the metadata block in the recording's meta buffer.
    pub meta: Option<(u64, u64)>,
    pub kind: LayoutKind,
}

/// Native replay where wgpu has no Vulkan backend: always off.
#[cfg(not(native_vk))]
pub(crate) struct NativeSlot;

#[cfg(not(native_vk))]
impl NativeSlot {
    pub(crate) fn new() -> Self {
        NativeSlot
    }
}

#[cfg(not(native_vk))]
impl crate::device::GpuDevice {
    /// Native Vulkan replay needs wgpu's Vulkan backend, absent on this target: no effect.
    pub fn set_replay_native(&self, _on: bool) {}

    /// Native Vulkan replay needs wgpu's Vulkan backend, absent on this target: no effect.
    pub fn set_replay_native_secondary(&self, _on: bool) {}

    /// Always `false` on this target.
    pub fn replay_native(&self) -> bool {
        false
    }
}

#[cfg(not(native_vk))]
impl crate::device::GpuDevice {
    /// Never called: no native command buffer exists on this target.
    pub(crate) fn execute_native(
        &self,
        _batch: &mut crate::batch::Batch,
        _rec: &super::Recording,
        _range: std::ops::Range<usize>,
        cb: std::convert::Infallible,
    ) -> mpsrt_core::Result<()> {
        match cb {}
    }
}

#[cfg(not(native_vk))]
impl super::Recording {
    /// How this recording replays: always `wgpu` on this target.
    pub fn replay_path(&self) -> String {
        "wgpu".into()
    }
}
