//! Host memory for CPU tensors: an immutable byte buffer aligned to 8 bytes, so it can be viewed
//! as a slice of any element type (including f64/i64) without copying.

use bytemuck::Pod;

/// Bytes of a CPU tensor. Immutable once built; ops always produce new buffers.
pub struct CpuBuffer {
    words: Vec<u64>,
    len: usize,
}

impl CpuBuffer {
    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        CpuBuffer { words: vec![0u64; len.div_ceil(8)], len }
    }

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    pub fn from_slice<T: Pod>(data: &[T]) -> Self {
        Self::from_bytes(bytemuck::cast_slice(data))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// View as elements; `len` must be a multiple of `size_of::<T>()` (guaranteed by tensor code).
    pub fn as_slice<T: Pod>(&self) -> &[T] {
        let n = self.len / std::mem::size_of::<T>();
        &bytemuck::cast_slice::<u64, T>(&self.words)[..n]
    }

    pub fn as_mut_slice<T: Pod>(&mut self) -> &mut [T] {
        let n = self.len / std::mem::size_of::<T>();
        &mut bytemuck::cast_slice_mut::<u64, T>(&mut self.words)[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_views_round_trip() {
        let b = CpuBuffer::from_slice(&[1.5f64, -2.0]);
        assert_eq!(b.len(), 16);
        assert_eq!(b.as_slice::<f64>(), &[1.5, -2.0]);
        let c = CpuBuffer::from_bytes(&[1, 2, 3]);
        assert_eq!(c.bytes(), &[1, 2, 3]);
        assert_eq!(c.as_slice::<u8>(), &[1, 2, 3]);
    }
}
