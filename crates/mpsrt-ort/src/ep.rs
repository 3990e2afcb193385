//! The factory (`MpsrtExecutionProvider`: devices, EP creation) and the EP (`GetCapability`,
//! `Compile`). Every callback that does work runs inside [`crate::guard`], so a panic becomes an
//! `OrtStatus`; the ones that only return a constant or store one value through an out pointer
//! contain nothing that can panic (and an unwind out of an `extern "C"` fn aborts, never UB).

use crate::abi::*;
use crate::compute;
use crate::options::EpOptions;
use crate::ort::{self, api, ep_api, R};
use mpsrt_core::Place;
use mpsrt_engine::Session;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

pub const EP_NAME: &CStr = c"MpsrtExecutionProvider";
const VENDOR: &CStr = c"mpsrt";
const VERSION: &CStr = c"0.1.0";
const COMPAT: &CStr = c"mpsrt-0.1.0";
/// Metadata key on our `OrtEpDevice`s: the mpsrt GPU index (`"cpu"` when there is none).
const META_DEVICE: &CStr = c"mpsrt.device";
const META_ADAPTER: &CStr = c"mpsrt.adapter";

/// Our factory: `OrtEpFactory` first, so ORT's pointer is ours. It holds no state, and there
/// is one per process ([`FACTORY`]), never freed: a session created before
/// `unregister_execution_provider_library` still calls its `ReleaseEp`/`ReleaseAllocator`
/// through this table after ORT has released the factory.
#[repr(C)]
pub struct Factory {
    base: OrtEpFactory,
}

// SAFETY: an immutable table of function pointers.
unsafe impl Sync for Factory {}

/// The factory `CreateEpFactories` hands out (ORT only reads it).
pub fn factory_ptr() -> *mut OrtEpFactory {
    &FACTORY as *const Factory as *mut OrtEpFactory
}

static FACTORY: Factory = Factory {
    base: OrtEpFactory {
        ort_version_supported: ORT_API_LEVEL,
        get_name: f_name,
        get_vendor: f_vendor,
        get_supported_devices: f_devices,
        create_ep: f_create_ep,
        release_ep: f_release_ep,
        get_vendor_id: f_vendor_id,
        get_version: f_version,
        validate_compiled_model_compatibility_info: f_validate,
        create_allocator: f_create_allocator,
        release_allocator: f_release_allocator,
        create_data_transfer: f_data_transfer,
        is_stream_aware: f_stream_aware,
        create_sync_stream_for_device: f_stream,
        get_hardware_device_incompatibility_details: None,
        create_external_resource_importer_for_device: f_importer,
        get_num_custom_op_domains: f_num_domains,
        get_custom_op_domains: f_domains,
        reserved: [None; RESERVED],
    },
};

unsafe extern "C" fn f_name(_: *const OrtEpFactory) -> *const c_char {
    EP_NAME.as_ptr()
}
unsafe extern "C" fn f_vendor(_: *const OrtEpFactory) -> *const c_char {
    VENDOR.as_ptr()
}
unsafe extern "C" fn f_vendor_id(_: *const OrtEpFactory) -> u32 {
    0
}
unsafe extern "C" fn f_version(_: *const OrtEpFactory) -> *const c_char {
    VERSION.as_ptr()
}

/// The mpsrt GPUs as `(index, vendor id, device id, name)`.
fn our_gpus() -> Vec<(usize, u32, u32, String)> {
    (0..mpsrt_runtime::device_count())
        .filter_map(|i| {
            let d = mpsrt_runtime::gpu_device(i).ok()?;
            let p = d.properties();
            Some((i, p.vendor_id, p.device_id, p.display_name()))
        })
        .collect()
}

fn create_device(
    factory: *mut OrtEpFactory,
    hw: *const OrtHardwareDevice,
    device: &str,
    adapter: &str,
) -> R<*mut OrtEpDevice> {
    let a = api();
    let mut meta = ptr::null_mut();
    let mut opts = ptr::null_mut();
    let dev = CString::new(device).unwrap_or_default();
    let name = CString::new(adapter.replace('\0', " ")).unwrap_or_default();
    let mut out = ptr::null_mut();
    // SAFETY: per the C API; ORT copies both key-value sets.
    unsafe {
        a.CreateKeyValuePairs(&mut meta);
        a.AddKeyValuePair(meta, META_DEVICE.as_ptr(), dev.as_ptr());
        a.AddKeyValuePair(meta, META_ADAPTER.as_ptr(), name.as_ptr());
        a.CreateKeyValuePairs(&mut opts);
        if device != "cpu" {
            a.AddKeyValuePair(opts, c"device_id".as_ptr(), dev.as_ptr());
        }
        let s = (ep_api().create_ep_device)(factory, hw, meta, opts, &mut out);
        a.ReleaseKeyValuePairs(meta);
        a.ReleaseKeyValuePairs(opts);
        ort::check(s)?;
    }
    if let (Ok(gpu), true) = (device.parse::<usize>(), crate::device::enabled()) {
        let info = crate::device::INFOS.for_gpu(gpu)?;
        // SAFETY: per the C API; ORT copies the info.
        let s = unsafe { (ep_api().ep_device_add_allocator_info)(out, info) };
        if let Err(s) = ort::check(s) {
            // SAFETY: the device is not handed to ORT.
            unsafe { (ep_api().release_ep_device)(out) };
            return Err(s);
        }
    }
    Ok(out)
}

/// One `OrtEpDevice` per mpsrt GPU that matches an ORT GPU (vendor id, and device id when both
/// know it); when none matches (lavapipe, or ORT lists no GPU), one on ORT's CPU device, which
/// runs on mpsrt's first GPU if there is one and on mpsrt's CPU backend otherwise.
unsafe extern "C" fn f_devices(
    this: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> Status {
    crate::guard("GetSupportedDevices", || {
        // SAFETY: ORT passes `num_devices` devices and room for `max_ep_devices`.
        let hw: Vec<*const OrtHardwareDevice> =
            (0..num_devices).map(|i| unsafe { *devices.add(i) }).collect();
        let a = api();
        let gpus = our_gpus();
        let mut made: Vec<*mut OrtEpDevice> = Vec::new();
        let mut used = vec![false; gpus.len()];
        for &d in &hw {
            // SAFETY: per the C API.
            let (ty, vendor, dev) = unsafe {
                (
                    a.HardwareDevice_Type(d),
                    a.HardwareDevice_VendorId(d),
                    a.HardwareDevice_DeviceId(d),
                )
            };
            if ty != DEVICE_GPU || made.len() >= max_ep_devices {
                continue;
            }
            let hit = gpus
                .iter()
                .position(|g| !used[g.0] && g.1 == vendor && (g.2 == dev || g.2 == 0 || dev == 0));
            if let Some(k) = hit {
                used[k] = true;
                match create_device(this, d, &gpus[k].0.to_string(), &gpus[k].3) {
                    Ok(p) => made.push(p),
                    Err(s) => return s,
                }
            }
        }
        if made.is_empty() && max_ep_devices > 0 {
            // SAFETY: per the C API.
            if let Some(&cpu) =
                hw.iter().find(|&&d| unsafe { a.HardwareDevice_Type(d) } == DEVICE_CPU)
            {
                let (dev, name) = match gpus.first() {
                    Some(g) => (g.0.to_string(), g.3.clone()),
                    None => ("cpu".to_string(), "mpsrt CPU backend".to_string()),
                };
                match create_device(this, cpu, &dev, &name) {
                    Ok(p) => made.push(p),
                    Err(s) => return s,
                }
            }
        }
        crate::log(&format!(
            "GetSupportedDevices: {} ORT device(s), {} ours",
            hw.len(),
            made.len()
        ));
        for (i, p) in made.iter().enumerate() {
            // SAFETY: `i < max_ep_devices`.
            unsafe { *ep_devices.add(i) = *p };
        }
        // SAFETY: valid out pointer.
        unsafe { *num_ep_devices = made.len() };
        ptr::null_mut()
    })
}

unsafe extern "C" fn f_validate(
    _: *mut OrtEpFactory,
    _: *const *const OrtHardwareDevice,
    _: usize,
    _: *const c_char,
    compat: *mut i32,
) -> Status {
    // OrtCompiledModelCompatibility_EP_NOT_APPLICABLE (0): we write no EPContext models.
    // SAFETY: valid out pointer.
    unsafe { *compat = 0 };
    ptr::null_mut()
}
unsafe extern "C" fn f_create_allocator(
    this: *mut OrtEpFactory,
    info: *const OrtMemoryInfo,
    _: *const OrtKeyValuePairs,
    out: *mut *mut OrtAllocator,
) -> Status {
    crate::guard("CreateAllocator", || {
        let _ = this;
        // SAFETY: valid out pointer.
        unsafe { *out = ptr::null_mut() };
        let Some((gpu, ours)) = crate::device::INFOS.gpu_of(info) else {
            return ort::status(
                ORT_INVALID_ARGUMENT,
                "MpsrtExecutionProvider: CreateAllocator for a memory info this factory did not register",
            );
        };
        crate::log(&format!("CreateAllocator for GPU {gpu}"));
        // SAFETY: ORT hands it back to ReleaseAllocator.
        unsafe {
            *out = Box::into_raw(crate::device::new_allocator(gpu, ours)) as *mut OrtAllocator
        };
        ptr::null_mut()
    })
}
unsafe extern "C" fn f_release_allocator(_: *mut OrtEpFactory, a: *mut OrtAllocator) {
    let _ = crate::guard("ReleaseAllocator", || {
        if !a.is_null() {
            // SAFETY: made by f_create_allocator.
            drop(unsafe { Box::from_raw(a as *mut crate::device::Allocator) });
        }
        ptr::null_mut()
    });
}
unsafe extern "C" fn f_data_transfer(_: *mut OrtEpFactory, out: *mut *mut c_void) -> Status {
    // The process-wide data transfer (ORT never writes through it; Release is a no-op).
    let p = &crate::device::TRANSFER as *const crate::device::DataTransfer as *mut c_void;
    // SAFETY: valid out pointer.
    unsafe { *out = p };
    ptr::null_mut()
}
unsafe extern "C" fn f_stream_aware(_: *const OrtEpFactory) -> bool {
    false
}
unsafe extern "C" fn f_stream(
    _: *mut OrtEpFactory,
    _: *const OrtMemoryDevice,
    _: *const OrtKeyValuePairs,
    out: *mut *mut c_void,
) -> Status {
    // SAFETY: valid out pointer.
    unsafe { *out = ptr::null_mut() };
    ptr::null_mut()
}
unsafe extern "C" fn f_importer(
    _: *mut OrtEpFactory,
    _: *const OrtEpDevice,
    out: *mut *mut c_void,
) -> Status {
    // SAFETY: valid out pointer.
    unsafe { *out = ptr::null_mut() };
    ptr::null_mut()
}
unsafe extern "C" fn f_num_domains(_: *mut OrtEpFactory, n: *mut usize) -> Status {
    // SAFETY: valid out pointer.
    unsafe { *n = 0 };
    ptr::null_mut()
}
unsafe extern "C" fn f_domains(_: *mut OrtEpFactory, _: *mut *mut c_void, _: usize) -> Status {
    ptr::null_mut()
}

/// Our EP: `OrtEp` first, so ORT's pointer is ours.
#[repr(C)]
pub struct Ep {
    base: OrtEp,
    place: Place,
    options: EpOptions,
    /// Sessions compiled while claiming, by group key, taken by `Compile` (weights are
    /// imported once); what `Compile` does not take is dropped when it ends.
    compiled: Mutex<HashMap<Vec<String>, Session>>,
}

unsafe extern "C" fn f_create_ep(
    _: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    metadata: *const *const OrtKeyValuePairs,
    num_devices: usize,
    session_options: *const OrtSessionOptions,
    _: *const OrtLogger,
    out: *mut *mut OrtEp,
) -> Status {
    crate::guard("CreateEp", || {
        let _ = devices;
        // The device the user picked (first selected OrtEpDevice), then provider options.
        let picked = if num_devices > 0 && !metadata.is_null() {
            // SAFETY: one metadata set per device.
            let kv = unsafe { *metadata };
            // SAFETY: per the C API.
            let v = if kv.is_null() {
                ptr::null()
            } else {
                unsafe { api().GetKeyValue(kv, META_DEVICE.as_ptr()) }
            };
            ort::cstr(v)
        } else {
            String::new()
        };
        let options = match EpOptions::from_session(session_options, &picked) {
            Ok(o) => o,
            Err(msg) => {
                return ort::status(ORT_INVALID_ARGUMENT, &format!("MpsrtExecutionProvider: {msg}"))
            }
        };
        let place = match options.place() {
            Ok(p) => p,
            Err(msg) => {
                return ort::status(ORT_INVALID_ARGUMENT, &format!("MpsrtExecutionProvider: {msg}"))
            }
        };
        crate::log(&format!("CreateEp on {place} with {options:?}"));
        let ep = Box::new(Ep {
            base: OrtEp {
                ort_version_supported: ORT_API_LEVEL,
                get_name: ep_name,
                get_capability: ep_get_capability,
                compile: ep_compile,
                release_node_compute_infos: ep_release_infos,
                get_preferred_data_layout: None,
                should_convert_data_layout_for_op: None,
                set_dynamic_options: None,
                on_run_start: None,
                on_run_end: None,
                create_allocator: None,
                create_sync_stream_for_device: None,
                get_compiled_model_compatibility_info: ep_compat,
                get_kernel_registry: None,
                is_concurrent_run_supported: None,
                reserved: [None; RESERVED],
            },
            place,
            options,
            compiled: Mutex::new(HashMap::new()),
        });
        // SAFETY: valid out pointer; ORT hands it back to ReleaseEp.
        unsafe { *out = Box::into_raw(ep) as *mut OrtEp };
        ptr::null_mut()
    })
}

unsafe extern "C" fn f_release_ep(_: *mut OrtEpFactory, ep: *mut OrtEp) {
    let _ = crate::guard("ReleaseEp", || {
        if !ep.is_null() {
            // SAFETY: created by f_create_ep.
            drop(unsafe { Box::from_raw(ep as *mut Ep) });
        }
        ptr::null_mut()
    });
}

unsafe extern "C" fn ep_name(_: *const OrtEp) -> *const c_char {
    EP_NAME.as_ptr()
}
unsafe extern "C" fn ep_compat(_: *mut OrtEp, _: *const OrtGraph) -> *const c_char {
    COMPAT.as_ptr()
}

unsafe extern "C" fn ep_get_capability(
    this: *mut OrtEp,
    graph: *const OrtGraph,
    info: *mut OrtEpGraphSupportInfo,
) -> Status {
    crate::guard("GetCapability", || {
        // SAFETY: `this` is our Ep.
        let ep = unsafe { &*(this as *const Ep) };
        let claimed = match crate::capability::claim(
            graph,
            ep.place,
            ep.options.engine(),
            ep.options.precision,
            ep.options.min_elements,
        ) {
            Ok(g) => g,
            Err(s) => return s,
        };
        crate::log(&format!(
            "GetCapability: claiming {} group(s) of sizes {:?}",
            claimed.len(),
            claimed.iter().map(|c| c.nodes.len()).collect::<Vec<_>>()
        ));
        let mut groups = Vec::with_capacity(claimed.len());
        {
            let mut cache = ep.compiled.lock().unwrap_or_else(|p| p.into_inner());
            for c in claimed {
                cache.insert(c.key, c.session);
                groups.push(c.nodes);
            }
        }
        // The EP keeps its own copy of the weights, so ORT may free the ones only we read.
        let opts = OrtNodeFusionOptions {
            ort_version_supported: ORT_API_LEVEL,
            drop_constant_initializers: true,
        };
        for g in groups {
            // SAFETY: the nodes belong to `graph`.
            let s = unsafe { (ep_api().add_nodes_to_fuse)(info, g.as_ptr(), g.len(), &opts) };
            if !s.is_null() {
                return s;
            }
        }
        ptr::null_mut()
    })
}

unsafe extern "C" fn ep_compile(
    this: *mut OrtEp,
    graphs: *const *const OrtGraph,
    fused: *const *const OrtNode,
    count: usize,
    infos: *mut *mut OrtNodeComputeInfo,
    _ep_context_nodes: *mut *mut OrtNode,
) -> Status {
    crate::guard("Compile", || {
        // SAFETY: `this` is our Ep.
        let ep = unsafe { &*(this as *const Ep) };
        let mut cache = std::mem::take(&mut *ep.compiled.lock().unwrap_or_else(|p| p.into_inner()));
        let mut done: Vec<*mut OrtNodeComputeInfo> = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: ORT passes `count` graphs and fused nodes.
            let (g, f) = unsafe { (*graphs.add(i), *fused.add(i)) };
            match compute::compile(g, f, ep.place, &ep.options, &mut cache) {
                Ok(c) => done.push(Box::into_raw(c) as *mut OrtNodeComputeInfo),
                Err(s) => {
                    for p in done {
                        // SAFETY: made just above, not yet handed to ORT.
                        unsafe { compute::release(p) };
                    }
                    return s;
                }
            }
        }
        for (i, p) in done.into_iter().enumerate() {
            // SAFETY: room for `count` infos.
            unsafe { *infos.add(i) = p };
        }
        ptr::null_mut()
    })
}

unsafe extern "C" fn ep_release_infos(
    _: *mut OrtEp,
    infos: *mut *mut OrtNodeComputeInfo,
    n: usize,
) {
    let _ = crate::guard("ReleaseNodeComputeInfos", || {
        for i in 0..n {
            // SAFETY: each came from ep_compile.
            unsafe { compute::release(*infos.add(i)) };
        }
        ptr::null_mut()
    });
}
