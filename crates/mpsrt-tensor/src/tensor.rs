//! The `Tensor` handle: storage (shared, immutable) + layout + dtype. Views share storage;
//! moving between places copies.

use crate::elementwise;
use mpsrt_core::{numel, DType, Error, Layout, Place, Result};
use mpsrt_kernels::Expr;
use mpsrt_runtime::{CpuBuffer, Storage};
use std::fmt;
use std::sync::Arc;

/// Fails for a dtype the GPU cannot hold (int64, float64, ...), naming the cast to make.
fn check_gpu_dtype(op: &str, dtype: DType, place: Place) -> Result<()> {
    if dtype.gpu_supported() {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "{dtype} is not supported on the GPU ({place}); cast first, e.g. .astype({:?})",
            dtype.gpu_fallback().name()
        ),
    ))
}

/// An n-dimensional array on the CPU or a GPU device.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) storage: Storage,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, place={})",
            self.layout.shape,
            self.dtype,
            self.place()
        )
    }
}

fn check_len(op: &str, bytes: usize, dtype: DType, shape: &[usize]) -> Result<()> {
    let want = mpsrt_core::checked_nbytes(op, shape, dtype.size())?;
    if bytes != want {
        return Err(Error::shape(
            op,
            format!(
                "{bytes} bytes given for shape {shape:?} of {dtype}, expected {want} ({} elements)",
                numel(shape)
            ),
        ));
    }
    Ok(())
}

impl Tensor {
    /// Build from little-endian element bytes (bool as 0/1 bytes) on `place`.
    pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize], place: Place) -> Result<Tensor> {
        check_len("from_bytes", bytes.len(), dtype, shape)?;
        let place = mpsrt_runtime::validate_place(place)?;
        let storage = match place {
            Place::Cpu => Storage::Cpu(Arc::new(CpuBuffer::from_bytes("from_bytes", bytes)?)),
            Place::Gpu(i) => {
                check_gpu_dtype("to", dtype, place)?;
                // Straight from the caller's bytes into the upload: no host copy in between
                // (a batch-32 image feed is 19 MB; each extra fresh copy costs ~2 ms).
                Storage::Gpu(Arc::new(mpsrt_runtime::gpu_device(i)?.upload("from_bytes", bytes)?))
            }
        };
        Ok(Tensor { storage, layout: Layout::contiguous(shape), dtype })
    }

    /// Build from a slice of Rust numbers (`f32`, `i32`, `half::f16`, ...).
    pub fn from_slice<T: mpsrt_core::Element + bytemuck::Pod>(
        data: &[T],
        shape: &[usize],
        place: Place,
    ) -> Result<Tensor> {
        Self::from_bytes(bytemuck::cast_slice(data), T::DTYPE, shape, place)
    }

    /// Build a bool tensor.
    pub fn from_bools(data: &[bool], shape: &[usize], place: Place) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().map(|&b| b as u8).collect();
        Self::from_bytes(&bytes, DType::Bool, shape, place)
    }

    pub(crate) fn from_parts(storage: Storage, layout: Layout, dtype: DType) -> Tensor {
        Tensor { storage, layout, dtype }
    }

    /// A tensor over existing storage, e.g. a window of a buffer a framework plugin handed out
    /// (`mpsrt-paddle`). Fails unless every element the layout can reach lies inside it.
    pub fn from_storage(storage: Storage, layout: Layout, dtype: DType) -> Result<Tensor> {
        if layout.shape.len() != layout.strides.len() {
            return Err(Error::shape(
                "from_storage",
                format!("shape {:?} and strides {:?} differ in rank", layout.shape, layout.strides),
            ));
        }
        if layout.numel() > 0 {
            let (mut lo, mut hi) = (layout.offset as isize, layout.offset as isize);
            for (&d, &s) in layout.shape.iter().zip(&layout.strides) {
                let reach = (d as isize - 1) * s;
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
            let elems = storage.len() as isize / dtype.size() as isize;
            if lo < 0 || hi >= elems {
                return Err(Error::shape(
                    "from_storage",
                    format!(
                        "layout {:?} (strides {:?}, offset {}) reaches elements {lo}..={hi} of {dtype}, \
                         the storage holds {elems}",
                        layout.shape, layout.strides, layout.offset
                    ),
                ));
            }
        }
        Ok(Tensor { storage, layout, dtype })
    }

    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }
    pub fn strides(&self) -> &[isize] {
        &self.layout.strides
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn ndim(&self) -> usize {
        self.layout.ndim()
    }
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }
    pub fn place(&self) -> Place {
        self.storage.place()
    }
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    fn view(&self, layout: Layout) -> Tensor {
        Tensor { storage: self.storage.clone(), layout, dtype: self.dtype }
    }

    /// A dense row-major copy unless already dense (then a cheap clone).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        elementwise::map("contiguous", &[self], self.dtype, Expr::input(0), &[])
    }

    /// Copy to `place` (no-op if already there). f64/i64 cannot go to the GPU.
    pub fn to(&self, place: Place) -> Result<Tensor> {
        let place = mpsrt_runtime::validate_place(place)?;
        if place == self.place() {
            return Ok(self.clone());
        }
        if place.is_gpu() {
            check_gpu_dtype("to", self.dtype, place)?;
        }
        let bytes = self.to_bytes()?;
        let storage = match place {
            Place::Cpu => Storage::Cpu(Arc::new(CpuBuffer::from_bytes("to", &bytes)?)),
            Place::Gpu(i) => {
                Storage::Gpu(Arc::new(mpsrt_runtime::gpu_device(i)?.upload("to", &bytes)?))
            }
        };
        Ok(Tensor { storage, layout: Layout::contiguous(self.shape()), dtype: self.dtype })
    }

    /// The elements in row-major order as little-endian bytes (waits for the GPU if needed).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let t = self.contiguous()?;
        let size = t.dtype.size();
        let (start, n) = (t.layout.offset * size, t.numel() * size);
        // The copy is host memory whichever place the tensor is on.
        mpsrt_runtime::check_host_alloc("to_bytes", n)?;
        match &t.storage {
            Storage::Cpu(b) => Ok(b.bytes()[start..start + n].to_vec()),
            Storage::Gpu(b) => b.device().read(b, start as u64, n as u64),
        }
    }

    /// [`Tensor::to_bytes`] of several tensors; those on one GPU are read back with a single
    /// submission and wait (one round trip for all of a model's outputs).
    pub fn to_bytes_many(ts: &[&Tensor]) -> Result<Vec<Vec<u8>>> {
        let cs = ts.iter().map(|t| t.contiguous()).collect::<Result<Vec<_>>>()?;
        let gpu: Vec<&Arc<mpsrt_runtime::GpuBuffer>> = cs
            .iter()
            .filter_map(|t| match &t.storage {
                Storage::Gpu(b) => Some(b),
                Storage::Cpu(_) => None,
            })
            .collect();
        let one_device = gpu.windows(2).all(|w| w[0].device().index() == w[1].device().index());
        if gpu.len() < 2 || gpu.len() != cs.len() || !one_device {
            return cs.iter().map(|t| t.to_bytes()).collect();
        }
        let parts: Vec<(&mpsrt_runtime::GpuBuffer, u64, u64)> = cs
            .iter()
            .zip(&gpu)
            .map(|(t, b)| {
                let size = t.dtype.size();
                (&***b, (t.layout.offset * size) as u64, (t.numel() * size) as u64)
            })
            .collect();
        gpu[0].device().read_many(&parts)
    }

    /// The elements as `T`, which must match the dtype exactly.
    pub fn to_vec<T: mpsrt_core::Element + bytemuck::Pod>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::dtype(
                "to_vec",
                format!("tensor is {}, asked for {}", self.dtype, T::DTYPE),
            ));
        }
        Ok(bytemuck::pod_collect_to_vec(&self.to_bytes()?))
    }

    /// The elements converted to f64 (any dtype; for tests, printing and reductions on the host).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let bytes = self.to_bytes()?;
        Ok(crate::cpu::decode_f64(&bytes, self.dtype))
    }

    // ---- views (no copy) ----

    /// A view with a new shape; copies first only if the strides do not allow a view.
    /// One dim may be `-1` (inferred).
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let shape = infer_shape("reshape", shape, self.numel(), self.shape())?;
        match self.layout.reshape_view(&shape) {
            Some(l) => Ok(self.view(l)),
            None => {
                let c = self.contiguous()?;
                let l = c.layout.reshape_view(&shape).unwrap_or_else(|| Layout::contiguous(&shape));
                Ok(c.view(l))
            }
        }
    }

    pub fn permute(&self, perm: &[isize]) -> Result<Tensor> {
        Ok(self.view(self.layout.permute("permute", perm)?))
    }

    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        Ok(self.view(self.layout.transpose("transpose", a, b)?))
    }

    /// Python-style `start:stop:step` along `axis`.
    pub fn slice(
        &self,
        axis: isize,
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    ) -> Result<Tensor> {
        Ok(self.view(self.layout.slice("slice", axis, start, stop, step)?))
    }

    /// Index `i` along `axis`, dropping the axis.
    pub fn select(&self, axis: isize, index: isize) -> Result<Tensor> {
        Ok(self.view(self.layout.select("select", axis, index)?))
    }

    /// Broadcast to `shape` without copying (stride 0 on expanded dims).
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        Ok(self.view(self.layout.broadcast_to("expand", shape)?))
    }

    /// Insert a size-1 dim at `axis` (in `-(ndim+1)..=ndim`).
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        let n = self.ndim() as isize;
        let a = if axis < 0 { axis + n + 1 } else { axis };
        if a < 0 || a > n {
            return Err(Error::invalid(
                "unsqueeze",
                format!("axis {axis} out of range for rank {n} (expected {} to {n})", -n - 1),
            ));
        }
        let mut l = self.layout.clone();
        let stride = if (a as usize) < l.ndim() {
            l.strides[a as usize] * l.shape[a as usize] as isize
        } else {
            1
        };
        l.shape.insert(a as usize, 1);
        l.strides.insert(a as usize, stride);
        Ok(self.view(l))
    }

    /// Remove size-1 dims (all of them, or just `axis`).
    pub fn squeeze(&self, axis: Option<isize>) -> Result<Tensor> {
        let mut l = self.layout.clone();
        match axis {
            Some(a) => {
                let a = mpsrt_core::normalize_axis("squeeze", a, self.ndim())?;
                if l.shape.get(a) == Some(&1) {
                    l.shape.remove(a);
                    l.strides.remove(a);
                }
            }
            None => {
                let keep: Vec<usize> = (0..l.ndim()).filter(|&d| l.shape[d] != 1).collect();
                l = Layout {
                    shape: keep.iter().map(|&d| l.shape[d]).collect(),
                    strides: keep.iter().map(|&d| l.strides[d]).collect(),
                    offset: l.offset,
                };
            }
        }
        Ok(self.view(l))
    }

    /// Collapse dims `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.ndim() == 0 {
            return self.reshape(&[1]);
        }
        let s = mpsrt_core::normalize_axis("flatten", start, self.ndim())?;
        let e = mpsrt_core::normalize_axis("flatten", end, self.ndim())?;
        if s > e {
            return Err(Error::invalid(
                "flatten",
                format!("start axis {start} is after end axis {end}"),
            ));
        }
        let mut shape: Vec<isize> = self.shape()[..s].iter().map(|&d| d as isize).collect();
        shape.push(self.shape()[s..=e].iter().product::<usize>() as isize);
        shape.extend(self.shape()[e + 1..].iter().map(|&d| d as isize));
        self.reshape(&shape)
    }

    /// Convert to another dtype (a copy, also when the dtype is unchanged it is a cheap clone).
    pub fn astype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        if self.place().is_gpu() && !dtype.gpu_supported() {
            return Err(Error::dtype(
                "astype",
                format!(
                    "{dtype} is not supported on the GPU ({}); move the tensor to 'cpu' first",
                    self.place()
                ),
            ));
        }
        let expr = Expr::cast(mpsrt_kernels::VType::of(dtype), Expr::input(0));
        elementwise::map("astype", &[self], dtype, expr, &[])
    }
}

/// Resolve a shape with at most one `-1` against `numel`.
fn infer_shape(op: &str, shape: &[isize], numel: usize, from: &[usize]) -> Result<Vec<usize>> {
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(Error::invalid(
                    op,
                    format!("only one dimension can be -1, got {shape:?}"),
                ));
            }
        } else if d < 0 {
            return Err(Error::invalid(op, format!("invalid dimension {d} in {shape:?}")));
        } else {
            known = mpsrt_core::checked_mul(op, "the shape's element count", known, d as usize)?;
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape(
                op,
                format!("cannot reshape {from:?} ({numel} elements) into {shape:?}"),
            ));
        }
        out[i] = numel / known;
    }
    if mpsrt_core::checked_numel(op, &out)? != numel {
        return Err(Error::shape(
            op,
            format!("cannot reshape {from:?} ({numel} elements) into {shape:?}"),
        ));
    }
    Ok(out)
}
