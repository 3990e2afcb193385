//! Tensors and errors that cross the server boundary, independent of HTTP, gRPC and the engine.

use crate::proto::inference::DataType;
use std::fmt;

/// Triton's wire data types (the `datatype` strings of the KServe v2 protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TritonDType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
    Bf16,
}

impl TritonDType {
    const ALL: [TritonDType; 14] = [
        Self::Bool,
        Self::Uint8,
        Self::Uint16,
        Self::Uint32,
        Self::Uint64,
        Self::Int8,
        Self::Int16,
        Self::Int32,
        Self::Int64,
        Self::Fp16,
        Self::Fp32,
        Self::Fp64,
        Self::Bytes,
        Self::Bf16,
    ];

    /// The protocol name, e.g. `"INT32"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::Uint8 => "UINT8",
            Self::Uint16 => "UINT16",
            Self::Uint32 => "UINT32",
            Self::Uint64 => "UINT64",
            Self::Int8 => "INT8",
            Self::Int16 => "INT16",
            Self::Int32 => "INT32",
            Self::Int64 => "INT64",
            Self::Fp16 => "FP16",
            Self::Fp32 => "FP32",
            Self::Fp64 => "FP64",
            Self::Bytes => "BYTES",
            Self::Bf16 => "BF16",
        }
    }

    /// Parses a protocol name; `None` for anything Triton does not define.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Bytes per element; `None` for variable-size BYTES.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            Self::Bool | Self::Uint8 | Self::Int8 => 1,
            Self::Uint16 | Self::Int16 | Self::Fp16 | Self::Bf16 => 2,
            Self::Uint32 | Self::Int32 | Self::Fp32 => 4,
            Self::Uint64 | Self::Int64 | Self::Fp64 => 8,
            Self::Bytes => return None,
        })
    }

    /// From model_config.proto's `DataType` (`TYPE_STRING` is BYTES).
    pub fn from_config(dt: DataType) -> Option<Self> {
        Some(match dt {
            DataType::TypeInvalid => return None,
            DataType::TypeBool => Self::Bool,
            DataType::TypeUint8 => Self::Uint8,
            DataType::TypeUint16 => Self::Uint16,
            DataType::TypeUint32 => Self::Uint32,
            DataType::TypeUint64 => Self::Uint64,
            DataType::TypeInt8 => Self::Int8,
            DataType::TypeInt16 => Self::Int16,
            DataType::TypeInt32 => Self::Int32,
            DataType::TypeInt64 => Self::Int64,
            DataType::TypeFp16 => Self::Fp16,
            DataType::TypeFp32 => Self::Fp32,
            DataType::TypeFp64 => Self::Fp64,
            DataType::TypeString => Self::Bytes,
            DataType::TypeBf16 => Self::Bf16,
        })
    }

    /// To model_config.proto's `DataType`.
    pub fn to_config(self) -> DataType {
        match self {
            Self::Bool => DataType::TypeBool,
            Self::Uint8 => DataType::TypeUint8,
            Self::Uint16 => DataType::TypeUint16,
            Self::Uint32 => DataType::TypeUint32,
            Self::Uint64 => DataType::TypeUint64,
            Self::Int8 => DataType::TypeInt8,
            Self::Int16 => DataType::TypeInt16,
            Self::Int32 => DataType::TypeInt32,
            Self::Int64 => DataType::TypeInt64,
            Self::Fp16 => DataType::TypeFp16,
            Self::Fp32 => DataType::TypeFp32,
            Self::Fp64 => DataType::TypeFp64,
            Self::Bytes => DataType::TypeString,
            Self::Bf16 => DataType::TypeBf16,
        }
    }
}

impl fmt::Display for TritonDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<mpsrt_core::DType> for TritonDType {
    fn from(d: mpsrt_core::DType) -> Self {
        use mpsrt_core::DType as D;
        match d {
            D::Bool => Self::Bool,
            D::U8 => Self::Uint8,
            D::I8 => Self::Int8,
            D::I32 => Self::Int32,
            D::I64 => Self::Int64,
            D::F16 => Self::Fp16,
            D::F32 => Self::Fp32,
            D::F64 => Self::Fp64,
        }
    }
}

/// Tensor contents: raw little-endian element bytes, or one byte string per BYTES element.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    Raw(Vec<u8>),
    Bytes(Vec<Vec<u8>>),
}

/// A host tensor crossing the server boundary (request input or response output).
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub datatype: TritonDType,
    pub shape: Vec<i64>,
    pub data: TensorData,
}

impl HostTensor {
    /// Number of elements the shape describes, or `None` if a dim is negative or it overflows.
    pub fn element_count(shape: &[i64]) -> Option<usize> {
        shape
            .iter()
            .try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
    }

    /// Checks that the data holds exactly as many elements/bytes as the shape and dtype say.
    pub fn check_size(&self) -> Result<(), ServeError> {
        let n = Self::element_count(&self.shape).ok_or_else(|| {
            ServeError::invalid(format!("input '{}' has invalid shape {:?}", self.name, self.shape))
        })?;
        match (&self.data, self.datatype.size()) {
            (TensorData::Raw(b), Some(sz)) if Some(b.len()) == n.checked_mul(sz) => Ok(()),
            (TensorData::Raw(b), Some(sz)) => Err(ServeError::invalid(format!(
                "unexpected total byte size {} for input '{}', expecting {}",
                b.len(),
                self.name,
                n.saturating_mul(sz)
            ))),
            (TensorData::Bytes(v), None) if v.len() == n => Ok(()),
            (TensorData::Bytes(v), None) => Err(ServeError::invalid(format!(
                "unexpected number of string elements {} for input '{}', expecting {}",
                v.len(),
                self.name,
                n
            ))),
            _ => Err(ServeError::internal(format!(
                "tensor '{}' holds data of the wrong kind for {}",
                self.name, self.datatype
            ))),
        }
    }
}

/// Triton's error categories; each maps to an HTTP status and a gRPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArg,
    NotFound,
    Unavailable,
    Internal,
    Unsupported,
    AlreadyExists,
    /// Over a server-wide budget right now (429 / RESOURCE_EXHAUSTED): retrying later may work.
    ResourceExhausted,
    /// The request itself is larger than allowed (413 / RESOURCE_EXHAUSTED).
    TooLarge,
}

/// An error answered to a client: category plus a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServeError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ServeError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, m)
    }
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, m)
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, m)
    }
    pub fn unsupported(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, m)
    }
    pub fn exhausted(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::ResourceExhausted, m)
    }
    pub fn too_large(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::TooLarge, m)
    }

    /// HTTP status as Triton maps it (NOT_FOUND 404, UNAVAILABLE 503, INTERNAL 500, UNSUPPORTED 501,
    /// RESOURCE_EXHAUSTED 429, too large 413, else 400).
    pub fn http_status(&self) -> u16 {
        match self.kind {
            ErrorKind::NotFound => 404,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
            ErrorKind::Unsupported => 501,
            ErrorKind::ResourceExhausted => 429,
            ErrorKind::TooLarge => 413,
            ErrorKind::InvalidArg | ErrorKind::AlreadyExists => 400,
        }
    }

    /// gRPC status with the matching code.
    pub fn to_status(&self) -> tonic::Status {
        let code = match self.kind {
            ErrorKind::InvalidArg => tonic::Code::InvalidArgument,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::Unavailable => tonic::Code::Unavailable,
            ErrorKind::Internal => tonic::Code::Internal,
            ErrorKind::Unsupported => tonic::Code::Unimplemented,
            ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorKind::ResourceExhausted | ErrorKind::TooLarge => tonic::Code::ResourceExhausted,
        };
        tonic::Status::new(code, self.message.clone())
    }
}

impl From<mpsrt_core::Error> for ServeError {
    fn from(e: mpsrt_core::Error) -> Self {
        use mpsrt_core::ErrorKind as K;
        let kind = match e.kind {
            K::InvalidArgument | K::Shape | K::DType => ErrorKind::InvalidArg,
            K::Unsupported => ErrorKind::Unsupported,
            K::OutOfMemory | K::Device | K::Io => ErrorKind::Internal,
        };
        Self::new(kind, e.to_string())
    }
}
