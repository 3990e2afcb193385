//! The single error type. Every message starts with the op that failed (`"[conv2d] ..."`)
//! and says what was given and what was expected; the kind decides the Python exception.

use std::fmt;

/// What went wrong, coarsely: decides the exception type in Python and the status code in the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Bad argument value (axis, kernel size, place string...). Python `ValueError`.
    InvalidArgument,
    /// Shapes that do not fit together. Python `ValueError`.
    Shape,
    /// Unsupported or mismatched element type. Python `TypeError`.
    DType,
    /// An allocation over the configured limit. Python `MemoryError`.
    OutOfMemory,
    /// The device (adapter, driver, submission) failed. Python `RuntimeError`.
    Device,
    /// Valid request that mpsrt does not implement (yet). Python `NotImplementedError`.
    Unsupported,
    /// File or stream I/O. Python `OSError`.
    Io,
}

/// An error from an mpsrt operation; `Display` gives `"[op] message"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub op: String,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, op: impl Into<String>, message: impl Into<String>) -> Self {
        Error { kind, op: op.into(), message: message.into() }
    }
    pub fn invalid(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, op, message)
    }
    pub fn shape(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Shape, op, message)
    }
    pub fn dtype(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::DType, op, message)
    }
    pub fn oom(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutOfMemory, op, message)
    }
    pub fn device(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Device, op, message)
    }
    pub fn unsupported(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, op, message)
    }
    pub fn io(op: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, op, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.op, self.message)
    }
}

impl std::error::Error for Error {}
