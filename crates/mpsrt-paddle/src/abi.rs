//! Hand-written `repr(C)` mirrors of Paddle's plug-in structs (`paddle/phi/backends/device_ext.h`
//! and `paddle/phi/capi/include/*.h`, Paddle 3.x). No Paddle header is needed to build: the
//! layouts are pinned by the size/offset tests below (numbers checked with g++ `offsetof`
//! against Paddle 3.3.1) and checked again at load against the sizes Paddle passes in.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `C_Status`: 0 success, 1 warning, 2 failed (resource exhausted), 3 error, 4 plugin error.
pub type C_Status = c_int;
pub const C_SUCCESS: C_Status = 0;
pub const C_FAILED: C_Status = 2;
pub const C_ERROR: C_Status = 3;

/// `struct C_Device_st { int id; }`.
#[repr(C)]
pub struct C_Device_st {
    pub id: c_int,
}
pub type C_Device = *mut C_Device_st;
pub type C_Stream = *mut c_void;
pub type C_Event = *mut c_void;

/// `CustomRuntimeVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CustomRuntimeVersion {
    pub major: usize,
    pub minor: usize,
    pub patch: usize,
}

/// The runtime interface version this plugin implements (`PADDLE_CUSTOM_RUNTIME_*_VERSION`).
pub const RUNTIME_VERSION: CustomRuntimeVersion =
    CustomRuntimeVersion { major: 0, minor: 1, patch: 1 };

/// `CustomRuntimeParams` (96 bytes on 64-bit targets).
#[repr(C)]
pub struct CustomRuntimeParams {
    pub size: usize,
    pub interface: *mut C_DeviceInterface,
    pub version: CustomRuntimeVersion,
    pub device_type: *const c_char,
    pub sub_device_type: *const c_char,
    pub pir_default_passes: *mut c_void,
    pub reserved: [c_char; 32],
}

/// Pointer slots in `C_DeviceInterface` (1128 bytes: `size` + 140 function pointers and
/// reserved slots). Mirrored as an array because every slot is one pointer wide; the named
/// indices in [`slot`] are the fields' `offsetof / 8`.
pub const IFACE_SLOTS: usize = 141;

#[repr(C)]
pub struct C_DeviceInterface {
    pub slots: [*const c_void; IFACE_SLOTS],
}

/// Slot indices (`offsetof(C_DeviceInterface, field) / 8`, Paddle 3.3.1).
pub mod slot {
    pub const SIZE: usize = 0;
    pub const INITIALIZE: usize = 1;
    pub const FINALIZE: usize = 2;
    pub const INIT_DEVICE: usize = 3;
    pub const SET_DEVICE: usize = 4;
    pub const GET_DEVICE: usize = 5;
    pub const DEINIT_DEVICE: usize = 6;
    pub const CREATE_STREAM: usize = 7;
    pub const DESTROY_STREAM: usize = 8;
    pub const QUERY_STREAM: usize = 9;
    pub const CREATE_EVENT: usize = 11;
    pub const RECORD_EVENT: usize = 12;
    pub const DESTROY_EVENT: usize = 13;
    pub const QUERY_EVENT: usize = 14;
    pub const SYNC_DEVICE: usize = 15;
    pub const SYNC_STREAM: usize = 16;
    pub const SYNC_EVENT: usize = 17;
    pub const STREAM_WAIT_EVENT: usize = 18;
    pub const DEV_ALLOC: usize = 27;
    pub const DEV_FREE: usize = 28;
    pub const DEV_MEMSET: usize = 29;
    pub const H2D: usize = 34;
    pub const D2H: usize = 35;
    pub const D2D: usize = 36;
    pub const ASYNC_H2D: usize = 38;
    pub const ASYNC_D2H: usize = 39;
    pub const ASYNC_D2D: usize = 40;
    pub const DEVICE_COUNT: usize = 50;
    pub const DEVICE_LIST: usize = 51;
    pub const MEM_STATS: usize = 52;
    pub const MIN_CHUNK: usize = 53;
    pub const MAX_CHUNK: usize = 54;
    pub const MAX_ALLOC: usize = 55;
    pub const EXTRA_PADDING: usize = 56;
}

/// `C_DataType` (the C API numbering; Paddle's internal `phi::DataType` differs).
pub mod pd_dtype {
    pub const BOOL: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 6;
    pub const INT16: i32 = 7;
    pub const INT32: i32 = 8;
    pub const INT64: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const FLOAT32: i32 = 11;
    pub const FLOAT64: i32 = 12;
    pub const BFLOAT16: i32 = 13;
}

/// `PD_KernelArgumentType`.
pub mod arg {
    pub const TENSOR: i32 = 1;
    pub const BOOL: i32 = 2;
    pub const FLOAT32: i32 = 5;
    pub const INT32: i32 = 7;
    pub const INT64: i32 = 8;
    pub const STRING: i32 = 9;
    pub const SCALAR: i32 = 10;
    pub const INT_ARRAY: i32 = 11;
    pub const DATA_TYPE: i32 = 12;
    pub const LIST_INT32: i32 = 16;
    pub const LIST_INT64: i32 = 17;
    pub const OPTIONAL_TENSOR: i32 = 24;
    pub const LIST_TENSOR: i32 = 25;
}

/// `PD_List { size_t size; void* data; }`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PD_List {
    pub size: usize,
    pub data: *mut c_void,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn runtime_params_layout_matches_paddle_3_3() {
        assert_eq!(size_of::<CustomRuntimeParams>(), 96);
        assert_eq!(offset_of!(CustomRuntimeParams, interface), 8);
        assert_eq!(offset_of!(CustomRuntimeParams, version), 16);
        assert_eq!(offset_of!(CustomRuntimeParams, device_type), 40);
        assert_eq!(offset_of!(CustomRuntimeParams, sub_device_type), 48);
        assert_eq!(offset_of!(CustomRuntimeParams, pir_default_passes), 56);
        assert_eq!(offset_of!(CustomRuntimeParams, reserved), 64);
        assert_eq!(size_of::<CustomRuntimeVersion>(), 24);
    }

    #[test]
    fn device_interface_layout_matches_paddle_3_3() {
        assert_eq!(size_of::<C_DeviceInterface>(), 1128);
        // Offsets of a few named fields, in bytes, from g++ on device_ext.h (3.3.1).
        assert_eq!(slot::INITIALIZE * 8, 8);
        assert_eq!(slot::STREAM_WAIT_EVENT * 8, 144);
        assert_eq!(slot::DEV_ALLOC * 8, 216);
        assert_eq!(slot::H2D * 8, 272);
        assert_eq!(slot::ASYNC_D2D * 8, 320);
        assert_eq!(slot::DEVICE_COUNT * 8, 400);
        assert_eq!(slot::MIN_CHUNK * 8, 424);
        assert_eq!(size_of::<C_Device_st>(), 4);
        assert_eq!(size_of::<PD_List>(), 16);
    }
}
