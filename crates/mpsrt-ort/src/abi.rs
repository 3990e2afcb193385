//! `repr(C)` mirrors of the ONNX Runtime plugin-EP ABI, written from the C headers
//! (`onnxruntime_c_api.h`, `onnxruntime_ep_c_api.h`) of the ORT 1.24 ABI level, which ORT 1.24
//! through 1.32 accept unchanged (the tables are append-only, and every struct we hand to ORT
//! carries `ort_version_supported`, so ORT never reads a member newer than that).
//!
//! * Structs **we own** (`OrtEpFactory`, `OrtEp`, `OrtNodeComputeInfo`, `OrtNodeFusionOptions`)
//!   are written in full for ABI level [`ORT_API_LEVEL`], followed by a block of NULL slots: a
//!   struct shorter than what ORT reads is exactly the bug that crashed the first proof.
//! * Tables **ORT owns** (`OrtApi`, `OrtEpApi`) are read by slot index: we only call the slots
//!   listed here, each checked against the bindgen layout of the 1.31 header in the tests.

use std::ffi::{c_char, c_void};

/// The ABI level our structs are written for (ORT 1.24); also the `OrtApi` version we request.
pub const ORT_API_LEVEL: u32 = 24;

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        /// Opaque ORT handle.
        #[repr(C)]
        pub struct $name {
            _p: [u8; 0],
        }
    )*};
}
opaque!(
    OrtStatus,
    OrtGraph,
    OrtNode,
    OrtValueInfo,
    OrtValue,
    OrtTypeInfo,
    OrtTensorTypeAndShapeInfo,
    OrtOpAttr,
    OrtKernelContext,
    OrtHardwareDevice,
    OrtEpDevice,
    OrtKeyValuePairs,
    OrtSessionOptions,
    OrtLogger,
    OrtMemoryInfo,
    OrtMemoryDevice,
    OrtAllocator,
    OrtEpGraphSupportInfo,
    OrtNodeComputeContext,
    OrtRunOptions,
);

pub type Status = *mut OrtStatus;

/// `OrtErrorCode` values we return.
pub const ORT_FAIL: i32 = 1;
pub const ORT_INVALID_ARGUMENT: i32 = 2;
pub const ORT_NOT_IMPLEMENTED: i32 = 9;
pub const ORT_EP_FAIL: i32 = 11;

/// `OrtHardwareDeviceType`.
pub const DEVICE_CPU: i32 = 0;
pub const DEVICE_GPU: i32 = 1;

/// `ONNXType::ONNX_TYPE_TENSOR`.
pub const ONNX_TYPE_TENSOR: i32 = 1;

/// `OrtOpAttrType`.
pub const ATTR_INT: i32 = 1;
pub const ATTR_INTS: i32 = 2;
pub const ATTR_FLOAT: i32 = 3;
pub const ATTR_FLOATS: i32 = 4;
pub const ATTR_STRING: i32 = 5;
pub const ATTR_STRINGS: i32 = 6;
pub const ATTR_GRAPH: i32 = 7;
pub const ATTR_TENSOR: i32 = 8;

/// `OrtApiBase`: what `CreateEpFactories` receives.
#[repr(C)]
pub struct OrtApiBase {
    pub get_api: unsafe extern "C" fn(version: u32) -> *const c_void,
    pub get_version_string: unsafe extern "C" fn() -> *const c_char,
}

/// Prefix of `OrtEpApi` (ORT owns it; we read the first five slots only).
#[repr(C)]
pub struct OrtEpApi {
    pub create_ep_device: unsafe extern "C" fn(
        factory: *mut OrtEpFactory,
        hardware_device: *const OrtHardwareDevice,
        ep_metadata: *const OrtKeyValuePairs,
        ep_options: *const OrtKeyValuePairs,
        ep_device: *mut *mut OrtEpDevice,
    ) -> Status,
    pub release_ep_device: unsafe extern "C" fn(device: *mut OrtEpDevice),
    pub add_nodes_to_fuse: unsafe extern "C" fn(
        info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        num_nodes: usize,
        options: *const OrtNodeFusionOptions,
    ) -> Status,
    pub add_single_node:
        unsafe extern "C" fn(info: *mut OrtEpGraphSupportInfo, node: *const OrtNode) -> Status,
    pub node_compute_context_node_name:
        unsafe extern "C" fn(ctx: *const OrtNodeComputeContext) -> *const c_char,
    /// 1.23: registers an allocator's memory info on a device we create.
    pub ep_device_add_allocator_info:
        unsafe extern "C" fn(device: *mut OrtEpDevice, info: *const OrtMemoryInfo) -> Status,
    pub memory_info_get_memory_device:
        unsafe extern "C" fn(info: *const OrtMemoryInfo) -> *const OrtMemoryDevice,
    pub value_get_memory_device: unsafe extern "C" fn(v: *const OrtValue) -> *const OrtMemoryDevice,
    pub memory_device_are_equal:
        unsafe extern "C" fn(a: *const OrtMemoryDevice, b: *const OrtMemoryDevice) -> bool,
    pub memory_device_get_device_type: unsafe extern "C" fn(d: *const OrtMemoryDevice) -> i32,
    pub memory_device_get_memory_type: unsafe extern "C" fn(d: *const OrtMemoryDevice) -> i32,
}

/// `OrtMemoryInfoDeviceType`.
pub const MEM_DEVICE_CPU: i32 = 0;
pub const MEM_DEVICE_GPU: i32 = 1;
/// `OrtDeviceMemoryType`.
pub const MEM_TYPE_DEFAULT: i32 = 0;
pub const MEM_TYPE_HOST_ACCESSIBLE: i32 = 5;
/// `OrtAllocatorType::OrtDeviceAllocator` (`OrtArenaAllocator` is reserved for ORT's own arena).
pub const DEVICE_ALLOCATOR: i32 = 0;

/// `OrtAllocator` (version 1.23 members; ORT reads `GetStats`/`AllocOnStream` only when
/// non-NULL, and members newer than `version` never).
#[repr(C)]
pub struct OrtAllocatorImpl {
    pub version: u32,
    pub alloc: unsafe extern "C" fn(this: *mut OrtAllocatorImpl, size: usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(this: *mut OrtAllocatorImpl, p: *mut c_void),
    pub info: unsafe extern "C" fn(this: *const OrtAllocatorImpl) -> *const OrtMemoryInfo,
    pub reserve: unsafe extern "C" fn(this: *mut OrtAllocatorImpl, size: usize) -> *mut c_void,
    pub get_stats: Unset,
    pub alloc_on_stream: Unset,
    pub reserved: [Unset; RESERVED],
}

/// `OrtDataTransferImpl` (1.23): copies between our device memory and the host.
#[repr(C)]
pub struct OrtDataTransferImpl {
    pub ort_version_supported: u32,
    pub release: unsafe extern "C" fn(this: *mut OrtDataTransferImpl),
    pub can_copy: unsafe extern "C" fn(
        this: *const OrtDataTransferImpl,
        src: *const OrtMemoryDevice,
        dst: *const OrtMemoryDevice,
    ) -> bool,
    pub copy_tensors: unsafe extern "C" fn(
        this: *mut OrtDataTransferImpl,
        src: *const *const OrtValue,
        dst: *const *mut OrtValue,
        streams: *const *mut c_void,
        n: usize,
    ) -> Status,
    pub reserved: [Unset; RESERVED],
}

/// `OrtNodeFusionOptions` (1.23).
#[repr(C)]
pub struct OrtNodeFusionOptions {
    pub ort_version_supported: u32,
    pub drop_constant_initializers: bool,
}

/// `OrtNodeComputeInfo` (1.23): one per compiled fused node; ours is the first member of a
/// larger struct that carries the compiled model.
#[repr(C)]
pub struct OrtNodeComputeInfo {
    pub ort_version_supported: u32,
    pub create_state: unsafe extern "C" fn(
        this: *mut OrtNodeComputeInfo,
        ctx: *mut OrtNodeComputeContext,
        state: *mut *mut c_void,
    ) -> Status,
    pub compute: unsafe extern "C" fn(
        this: *mut OrtNodeComputeInfo,
        state: *mut c_void,
        ctx: *mut OrtKernelContext,
    ) -> Status,
    pub release_state: unsafe extern "C" fn(this: *mut OrtNodeComputeInfo, state: *mut c_void),
}

/// An optional member we leave NULL (ORT checks these before calling).
pub type Unset = Option<unsafe extern "C" fn()>;

/// NULL slots after our structs: if an ORT ever read one member past our declared level it
/// would see "not implemented", never garbage.
pub const RESERVED: usize = 16;

/// `OrtEp` at ABI level 1.24.
#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub get_name: unsafe extern "C" fn(this: *const OrtEp) -> *const c_char,
    pub get_capability: unsafe extern "C" fn(
        this: *mut OrtEp,
        graph: *const OrtGraph,
        info: *mut OrtEpGraphSupportInfo,
    ) -> Status,
    pub compile: unsafe extern "C" fn(
        this: *mut OrtEp,
        graphs: *const *const OrtGraph,
        fused_nodes: *const *const OrtNode,
        count: usize,
        infos: *mut *mut OrtNodeComputeInfo,
        ep_context_nodes: *mut *mut OrtNode,
    ) -> Status,
    pub release_node_compute_infos:
        unsafe extern "C" fn(this: *mut OrtEp, infos: *mut *mut OrtNodeComputeInfo, count: usize),
    pub get_preferred_data_layout: Unset,
    pub should_convert_data_layout_for_op: Unset,
    pub set_dynamic_options: Unset,
    pub on_run_start: Unset,
    pub on_run_end: Unset,
    pub create_allocator: Unset,
    pub create_sync_stream_for_device: Unset,
    pub get_compiled_model_compatibility_info:
        unsafe extern "C" fn(this: *mut OrtEp, graph: *const OrtGraph) -> *const c_char,
    /// 1.24; NULL: we compile fused nodes instead of registering kernels.
    pub get_kernel_registry: Unset,
    /// 1.24; NULL: ORT assumes concurrent runs are supported (they are: sessions lock).
    pub is_concurrent_run_supported: Unset,
    pub reserved: [Unset; RESERVED],
}

/// `OrtEpFactory` at ABI level 1.24.
#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub get_name: unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char,
    pub get_vendor: unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char,
    pub get_supported_devices: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        num_devices: usize,
        ep_devices: *mut *mut OrtEpDevice,
        max_ep_devices: usize,
        num_ep_devices: *mut usize,
    ) -> Status,
    pub create_ep: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        ep_metadata: *const *const OrtKeyValuePairs,
        num_devices: usize,
        session_options: *const OrtSessionOptions,
        logger: *const OrtLogger,
        ep: *mut *mut OrtEp,
    ) -> Status,
    pub release_ep: unsafe extern "C" fn(this: *mut OrtEpFactory, ep: *mut OrtEp),
    pub get_vendor_id: unsafe extern "C" fn(this: *const OrtEpFactory) -> u32,
    pub get_version: unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char,
    pub validate_compiled_model_compatibility_info: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        num_devices: usize,
        info: *const c_char,
        compat: *mut i32,
    ) -> Status,
    pub create_allocator: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        memory_info: *const OrtMemoryInfo,
        options: *const OrtKeyValuePairs,
        allocator: *mut *mut OrtAllocator,
    ) -> Status,
    pub release_allocator: unsafe extern "C" fn(this: *mut OrtEpFactory, a: *mut OrtAllocator),
    pub create_data_transfer:
        unsafe extern "C" fn(this: *mut OrtEpFactory, out: *mut *mut c_void) -> Status,
    pub is_stream_aware: unsafe extern "C" fn(this: *const OrtEpFactory) -> bool,
    pub create_sync_stream_for_device: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        device: *const OrtMemoryDevice,
        options: *const OrtKeyValuePairs,
        stream: *mut *mut c_void,
    ) -> Status,
    /// 1.24, optional.
    pub get_hardware_device_incompatibility_details: Unset,
    /// 1.24; implemented as "not supported" (out = NULL).
    pub create_external_resource_importer_for_device: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        device: *const OrtEpDevice,
        out: *mut *mut c_void,
    ) -> Status,
    /// 1.24: we provide no custom-op domains.
    pub get_num_custom_op_domains:
        unsafe extern "C" fn(this: *mut OrtEpFactory, n: *mut usize) -> Status,
    pub get_custom_op_domains: unsafe extern "C" fn(
        this: *mut OrtEpFactory,
        domains: *mut *mut c_void,
        n: usize,
    ) -> Status,
    pub reserved: [Unset; RESERVED],
}

/// Declares the `OrtApi` slots we call: `slot => fn Name(args) -> ret`. Slot numbers are the
/// member positions in `struct OrtApi` of `onnxruntime_c_api.h` (checked against ort-sys).
macro_rules! ort_api {
    ($( $slot:literal => fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? ; )*) => {
        /// The `OrtApi` function table, read by slot.
        #[derive(Clone, Copy)]
        pub struct OrtApi {
            table: *const *const c_void,
        }

        // SAFETY: the table is immutable and lives as long as the ORT library.
        unsafe impl Send for OrtApi {}
        unsafe impl Sync for OrtApi {}

        #[allow(non_snake_case, clippy::too_many_arguments)]
        impl OrtApi {
            /// # Safety
            /// `table` must be the `OrtApi*` returned by `OrtApiBase::GetApi(ORT_API_LEVEL)`.
            pub unsafe fn from_raw(table: *const c_void) -> OrtApi {
                OrtApi { table: table as *const *const c_void }
            }
            $(
                /// # Safety
                /// Arguments as the C API documents them.
                pub unsafe fn $name(&self, $($arg: $ty),*) $(-> $ret)? {
                    type F = unsafe extern "C" fn($($ty),*) $(-> $ret)?;
                    // SAFETY: the slot holds this function (layout test), ORT >= ORT_API_LEVEL.
                    unsafe {
                        let p = *self.table.add($slot);
                        let f: F = std::mem::transmute::<*const c_void, F>(p);
                        f($($arg),*)
                    }
                }
            )*
        }

        /// `(name, slot)` of every `OrtApi` function used.
        pub const API_SLOTS: &[(&str, usize)] = &[$((stringify!($name), $slot)),*];

        #[cfg(test)]
        pub(crate) fn ort_sys_slots() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name),
                std::mem::offset_of!(ort_sys::OrtApi, $name) / std::mem::size_of::<usize>())),*]
        }
    };
}

ort_api! {
    0 => fn CreateStatus(code: i32, msg: *const c_char) -> Status;
    2 => fn GetErrorMessage(status: *const OrtStatus) -> *const c_char;
    51 => fn GetTensorMutableData(v: *mut OrtValue, out: *mut *mut c_void) -> Status;
    55 => fn CastTypeInfoToTensorInfo(ti: *const OrtTypeInfo, out: *mut *const OrtTensorTypeAndShapeInfo) -> Status;
    56 => fn GetOnnxTypeFromTypeInfo(ti: *const OrtTypeInfo, out: *mut i32) -> Status;
    60 => fn GetTensorElementType(i: *const OrtTensorTypeAndShapeInfo, out: *mut i32) -> Status;
    61 => fn GetDimensionsCount(i: *const OrtTensorTypeAndShapeInfo, out: *mut usize) -> Status;
    62 => fn GetDimensions(i: *const OrtTensorTypeAndShapeInfo, dims: *mut i64, n: usize) -> Status;
    63 => fn GetSymbolicDimensions(i: *const OrtTensorTypeAndShapeInfo, dims: *mut *const c_char, n: usize) -> Status;
    65 => fn GetTensorTypeAndShape(v: *const OrtValue, out: *mut *mut OrtTensorTypeAndShapeInfo) -> Status;
    90 => fn KernelContext_GetInput(ctx: *const OrtKernelContext, i: usize, out: *mut *const OrtValue) -> Status;
    91 => fn KernelContext_GetOutput(ctx: *mut OrtKernelContext, i: usize, dims: *const i64, n: usize, out: *mut *mut OrtValue) -> Status;
    93 => fn ReleaseStatus(s: *mut OrtStatus);
    96 => fn ReleaseValue(v: *mut OrtValue);
    99 => fn ReleaseTensorTypeAndShapeInfo(i: *mut OrtTensorTypeAndShapeInfo);
    238 => fn GetSessionConfigEntry(o: *const OrtSessionOptions, key: *const c_char, value: *mut c_char, size: *mut usize) -> Status;
    237 => fn HasSessionConfigEntry(o: *const OrtSessionOptions, key: *const c_char, out: *mut i32) -> Status;
    272 => fn ReadOpAttr(a: *const OrtOpAttr, ty: i32, data: *mut c_void, len: usize, out: *mut usize) -> Status;
    289 => fn GetValueInfoName(v: *const OrtValueInfo, name: *mut *const c_char) -> Status;
    290 => fn GetValueInfoTypeInfo(v: *const OrtValueInfo, ti: *mut *const OrtTypeInfo) -> Status;
    295 => fn CreateKeyValuePairs(out: *mut *mut OrtKeyValuePairs);
    296 => fn AddKeyValuePair(kv: *mut OrtKeyValuePairs, key: *const c_char, value: *const c_char);
    297 => fn GetKeyValue(kv: *const OrtKeyValuePairs, key: *const c_char) -> *const c_char;
    300 => fn ReleaseKeyValuePairs(kv: *mut OrtKeyValuePairs);
    307 => fn HardwareDevice_Type(d: *const OrtHardwareDevice) -> i32;
    308 => fn HardwareDevice_VendorId(d: *const OrtHardwareDevice) -> u32;
    310 => fn HardwareDevice_DeviceId(d: *const OrtHardwareDevice) -> u32;
    317 => fn GetEpApi() -> *const OrtEpApi;
    323 => fn ValueInfo_GetValueProducer(v: *const OrtValueInfo, node: *mut *const OrtNode, index: *mut usize) -> Status;
    326 => fn ValueInfo_GetInitializerValue(v: *const OrtValueInfo, out: *mut *const OrtValue) -> Status;
    330 => fn ValueInfo_IsGraphOutput(v: *const OrtValueInfo, out: *mut bool) -> Status;
    331 => fn ValueInfo_IsConstantInitializer(v: *const OrtValueInfo, out: *mut bool) -> Status;
    335 => fn Graph_GetOnnxIRVersion(g: *const OrtGraph, out: *mut i64) -> Status;
    336 => fn Graph_GetNumOperatorSets(g: *const OrtGraph, out: *mut usize) -> Status;
    337 => fn Graph_GetOperatorSets(g: *const OrtGraph, domains: *mut *const c_char, versions: *mut i64, n: usize) -> Status;
    338 => fn Graph_GetNumInputs(g: *const OrtGraph, out: *mut usize) -> Status;
    339 => fn Graph_GetInputs(g: *const OrtGraph, out: *mut *const OrtValueInfo, n: usize) -> Status;
    340 => fn Graph_GetNumOutputs(g: *const OrtGraph, out: *mut usize) -> Status;
    341 => fn Graph_GetOutputs(g: *const OrtGraph, out: *mut *const OrtValueInfo, n: usize) -> Status;
    344 => fn Graph_GetNumNodes(g: *const OrtGraph, out: *mut usize) -> Status;
    345 => fn Graph_GetNodes(g: *const OrtGraph, out: *mut *const OrtNode, n: usize) -> Status;
    349 => fn Node_GetName(n: *const OrtNode, out: *mut *const c_char) -> Status;
    350 => fn Node_GetOperatorType(n: *const OrtNode, out: *mut *const c_char) -> Status;
    351 => fn Node_GetDomain(n: *const OrtNode, out: *mut *const c_char) -> Status;
    353 => fn Node_GetNumInputs(n: *const OrtNode, out: *mut usize) -> Status;
    354 => fn Node_GetInputs(n: *const OrtNode, out: *mut *const OrtValueInfo, k: usize) -> Status;
    355 => fn Node_GetNumOutputs(n: *const OrtNode, out: *mut usize) -> Status;
    356 => fn Node_GetOutputs(n: *const OrtNode, out: *mut *const OrtValueInfo, k: usize) -> Status;
    357 => fn Node_GetNumImplicitInputs(n: *const OrtNode, out: *mut usize) -> Status;
    359 => fn Node_GetNumAttributes(n: *const OrtNode, out: *mut usize) -> Status;
    360 => fn Node_GetAttributes(n: *const OrtNode, out: *mut *const OrtOpAttr, k: usize) -> Status;
    362 => fn OpAttr_GetTensorAttributeAsOrtValue(a: *const OrtOpAttr, out: *mut *mut OrtValue) -> Status;
    363 => fn OpAttr_GetType(a: *const OrtOpAttr, out: *mut i32) -> Status;
    364 => fn OpAttr_GetName(a: *const OrtOpAttr, out: *mut *const c_char) -> Status;
    365 => fn Node_GetNumSubgraphs(n: *const OrtNode, out: *mut usize) -> Status;
    378 => fn GetTensorData(v: *const OrtValue, out: *mut *const c_void) -> Status;
    318 => fn GetTensorSizeInBytes(v: *const OrtValue, out: *mut usize) -> Status;
    320 => fn CreateMemoryInfo_V2(name: *const c_char, device_type: i32, vendor_id: u32, device_id: i32, mem_type: i32, alignment: usize, allocator_type: i32, out: *mut *mut OrtMemoryInfo) -> Status;
    94 => fn ReleaseMemoryInfo(i: *mut OrtMemoryInfo);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    const P: usize = size_of::<usize>();

    #[test]
    fn api_slots_match_the_header() {
        // ort-sys is bindgen's translation of onnxruntime_c_api.h (1.31): an independent source.
        let wrong: Vec<String> = API_SLOTS
            .iter()
            .zip(ort_sys_slots())
            .filter(|((_, ours), (_, theirs))| ours != theirs)
            .map(|((name, ours), (_, theirs))| format!("{name}: ours {ours}, header {theirs}"))
            .collect();
        assert!(wrong.is_empty(), "OrtApi slots differ from the header: {wrong:#?}");
        // Every slot we call exists at ABI level 24 (ORT's GetApi(24) table is long enough).
        let first_v24 = offset_of!(ort_sys::OrtApi, TensorTypeAndShape_HasShape) / P;
        assert!(API_SLOTS.iter().all(|(_, s)| *s < first_v24), "a slot is newer than 1.23");
    }

    #[test]
    fn ort_api_base_layout() {
        assert_eq!(size_of::<OrtApiBase>(), 2 * P);
        assert_eq!(offset_of!(OrtApiBase, get_version_string), P);
        assert_eq!(size_of::<OrtApiBase>(), size_of::<ort_sys::OrtApiBase>());
    }

    #[test]
    fn ep_api_prefix_layout() {
        assert_eq!(offset_of!(OrtEpApi, create_ep_device), 0);
        assert_eq!(offset_of!(OrtEpApi, release_ep_device), P);
        assert_eq!(offset_of!(OrtEpApi, add_nodes_to_fuse), 2 * P);
        assert_eq!(offset_of!(OrtEpApi, add_single_node), 3 * P);
        assert_eq!(offset_of!(OrtEpApi, node_compute_context_node_name), 4 * P);
    }

    #[test]
    fn ep_api_memory_slots_layout() {
        // OrtEpApi 1.23 members after NodeComputeContext_NodeName, in header order.
        assert_eq!(offset_of!(OrtEpApi, ep_device_add_allocator_info), 5 * P);
        assert_eq!(offset_of!(OrtEpApi, memory_info_get_memory_device), 6 * P);
        assert_eq!(offset_of!(OrtEpApi, value_get_memory_device), 7 * P);
        assert_eq!(offset_of!(OrtEpApi, memory_device_are_equal), 8 * P);
        assert_eq!(offset_of!(OrtEpApi, memory_device_get_device_type), 9 * P);
        assert_eq!(offset_of!(OrtEpApi, memory_device_get_memory_type), 10 * P);
    }

    #[test]
    fn allocator_layout_matches_the_header() {
        // ort-sys (api-24) mirrors OrtAllocator through AllocOnStream.
        type Theirs = ort_sys::OrtAllocator;
        assert_eq!(offset_of!(OrtAllocatorImpl, alloc), offset_of!(Theirs, Alloc));
        assert_eq!(offset_of!(OrtAllocatorImpl, free), offset_of!(Theirs, Free));
        assert_eq!(offset_of!(OrtAllocatorImpl, info), offset_of!(Theirs, Info));
        assert_eq!(offset_of!(OrtAllocatorImpl, reserve), offset_of!(Theirs, Reserve));
        assert_eq!(offset_of!(OrtAllocatorImpl, get_stats), offset_of!(Theirs, GetStats));
        assert_eq!(
            offset_of!(OrtAllocatorImpl, alloc_on_stream),
            offset_of!(Theirs, AllocOnStream)
        );
        assert!(size_of::<OrtAllocatorImpl>() >= size_of::<Theirs>());
    }

    #[test]
    fn data_transfer_layout() {
        assert_eq!(offset_of!(OrtDataTransferImpl, release), P);
        assert_eq!(offset_of!(OrtDataTransferImpl, can_copy), 2 * P);
        assert_eq!(offset_of!(OrtDataTransferImpl, copy_tensors), 3 * P);
        assert_eq!(size_of::<OrtDataTransferImpl>(), (4 + RESERVED) * P);
    }

    #[test]
    fn fusion_options_layout() {
        assert_eq!(size_of::<OrtNodeFusionOptions>(), 8);
        assert_eq!(offset_of!(OrtNodeFusionOptions, drop_constant_initializers), 4);
    }

    #[test]
    fn node_compute_info_layout() {
        assert_eq!(size_of::<OrtNodeComputeInfo>(), 4 * P);
        assert_eq!(offset_of!(OrtNodeComputeInfo, create_state), P);
        assert_eq!(offset_of!(OrtNodeComputeInfo, compute), 2 * P);
        assert_eq!(offset_of!(OrtNodeComputeInfo, release_state), 3 * P);
        assert_eq!(align_of::<OrtNodeComputeInfo>(), P);
    }

    #[test]
    fn ep_layout() {
        // uint32 version (padded to a pointer) + 14 function pointers at ABI 1.24.
        assert_eq!(offset_of!(OrtEp, get_name), P);
        assert_eq!(offset_of!(OrtEp, get_capability), 2 * P);
        assert_eq!(offset_of!(OrtEp, compile), 3 * P);
        assert_eq!(offset_of!(OrtEp, release_node_compute_infos), 4 * P);
        assert_eq!(offset_of!(OrtEp, get_preferred_data_layout), 5 * P);
        assert_eq!(offset_of!(OrtEp, on_run_start), 8 * P);
        assert_eq!(offset_of!(OrtEp, create_sync_stream_for_device), 11 * P);
        assert_eq!(offset_of!(OrtEp, get_compiled_model_compatibility_info), 12 * P);
        assert_eq!(offset_of!(OrtEp, get_kernel_registry), 13 * P);
        assert_eq!(offset_of!(OrtEp, is_concurrent_run_supported), 14 * P);
        assert_eq!(offset_of!(OrtEp, reserved), 15 * P);
        assert_eq!(size_of::<OrtEp>(), (15 + RESERVED) * P);
    }

    #[test]
    fn factory_layout() {
        assert_eq!(offset_of!(OrtEpFactory, get_name), P);
        assert_eq!(offset_of!(OrtEpFactory, get_vendor), 2 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_supported_devices), 3 * P);
        assert_eq!(offset_of!(OrtEpFactory, create_ep), 4 * P);
        assert_eq!(offset_of!(OrtEpFactory, release_ep), 5 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_vendor_id), 6 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_version), 7 * P);
        assert_eq!(offset_of!(OrtEpFactory, validate_compiled_model_compatibility_info), 8 * P);
        assert_eq!(offset_of!(OrtEpFactory, create_allocator), 9 * P);
        assert_eq!(offset_of!(OrtEpFactory, release_allocator), 10 * P);
        assert_eq!(offset_of!(OrtEpFactory, create_data_transfer), 11 * P);
        assert_eq!(offset_of!(OrtEpFactory, is_stream_aware), 12 * P);
        assert_eq!(offset_of!(OrtEpFactory, create_sync_stream_for_device), 13 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_hardware_device_incompatibility_details), 14 * P);
        assert_eq!(offset_of!(OrtEpFactory, create_external_resource_importer_for_device), 15 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_num_custom_op_domains), 16 * P);
        assert_eq!(offset_of!(OrtEpFactory, get_custom_op_domains), 17 * P);
        assert_eq!(size_of::<OrtEpFactory>(), (18 + RESERVED) * P);
    }
}
