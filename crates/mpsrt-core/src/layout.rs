//! Shapes, strides and views. A [`Layout`] maps a logical index to an element offset in a
//! buffer: `offset + sum(index[i] * strides[i])`. Views (transpose, slice with steps, broadcast)
//! only change the layout, never the data; ops read through the layout on both CPU and GPU.

use crate::{Error, Result};

/// Number of elements of a shape (1 for a scalar). Only for shapes already checked by
/// [`checked_numel`] (every tensor's layout is); saturates instead of wrapping otherwise.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or_else(|| {
        if shape.contains(&0) {
            0
        } else {
            usize::MAX
        }
    })
}

/// The largest element count or byte size a shape may have: `isize::MAX`, so every element
/// offset, stride and byte size of a checked shape fits in `isize` (what Rust's allocator
/// and slices require) and arithmetic on them cannot wrap.
pub const MAX_SIZE: usize = isize::MAX as usize;

/// Number of elements of a user-given shape, checked: the product (and each partial product,
/// so strides fit too) must not exceed [`MAX_SIZE`]. The error names the op and the shape.
/// The one place element counts of user shapes are computed; byte sizes go through
/// [`checked_nbytes`].
pub fn checked_numel(op: &str, shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    let mut n = 1usize;
    for &d in shape {
        n = match n.checked_mul(d) {
            Some(v) if v <= MAX_SIZE => v,
            _ => {
                return Err(Error::shape(
                    op,
                    format!(
                        "shape {shape:?} has too many elements: their count overflows the \
                         address space (at most {MAX_SIZE})"
                    ),
                ))
            }
        };
    }
    Ok(n)
}

/// Bytes of a dense tensor of `shape` with `elem_size`-byte elements, checked like
/// [`checked_numel`] (also the multiplication by the element size).
pub fn checked_nbytes(op: &str, shape: &[usize], elem_size: usize) -> Result<usize> {
    let n = checked_numel(op, shape)?;
    match n.checked_mul(elem_size) {
        Some(b) if b <= MAX_SIZE => Ok(b),
        _ => Err(Error::shape(
            op,
            format!(
                "shape {shape:?} with {elem_size}-byte elements needs more than {MAX_SIZE} bytes"
            ),
        )),
    }
}

/// `a * b` of sizes computed from user input (kernel extents, padded lengths...), or an error
/// naming the op and `what` was being computed.
pub fn checked_mul(op: &str, what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).filter(|&v| v <= MAX_SIZE).ok_or_else(|| {
        Error::shape(op, format!("{what} overflows: {a} * {b} is more than {MAX_SIZE}"))
    })
}

/// `a + b` of sizes computed from user input, or an error naming the op and `what`.
pub fn checked_add(op: &str, what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).filter(|&v| v <= MAX_SIZE).ok_or_else(|| {
        Error::shape(op, format!("{what} overflows: {a} + {b} is more than {MAX_SIZE}"))
    })
}

/// Row-major strides (in elements) for a shape. Saturating, so an unchecked huge shape gives
/// wrong strides instead of a panic; such shapes are refused before anything is allocated.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(isize::try_from(shape[i].max(1)).unwrap_or(isize::MAX));
    }
    strides
}

/// NumPy broadcasting of two shapes: align on the right, dims must be equal or 1.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() { 1 } else { a[i - (n - a.len())] };
        let db = if i < n - b.len() { 1 } else { b[i - (n - b.len())] };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                op,
                format!(
                    "shapes {a:?} and {b:?} cannot be broadcast together (dim {i}: {da} vs {db})"
                ),
            ));
        };
    }
    Ok(out)
}

/// Resolve a possibly negative axis against `ndim`.
pub fn normalize_axis(op: &str, axis: isize, ndim: usize) -> Result<usize> {
    let n = ndim as isize;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n.max(1) || (ndim == 0 && a != 0) {
        return Err(Error::invalid(
            op,
            format!(
                "axis {axis} is out of range for a tensor of rank {ndim} (expected {} to {})",
                -n.max(1),
                n.max(1) - 1
            ),
        ));
    }
    Ok(a as usize)
}

/// Shape + strides + offset, all in elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<isize>,
    pub offset: usize,
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Row-major dense with no gaps (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1isize;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc = acc.saturating_mul(self.shape[i] as isize);
        }
        true
    }

    /// The range of element offsets this view touches: `(min, max_exclusive)`; `(offset, offset)` if empty.
    pub fn span(&self) -> (usize, usize) {
        if self.numel() == 0 {
            return (self.offset, self.offset);
        }
        let (mut lo, mut hi) = (self.offset as isize, self.offset as isize);
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let ext = (d as isize - 1).saturating_mul(s);
            if ext < 0 {
                lo = lo.saturating_add(ext);
            } else {
                hi = hi.saturating_add(ext);
            }
        }
        (lo.max(0) as usize, (hi as usize).saturating_add(1))
    }

    /// Broadcast to `shape` (NumPy rules): new leading dims and size-1 dims get stride 0.
    pub fn broadcast_to(&self, op: &str, shape: &[usize]) -> Result<Layout> {
        if shape.len() < self.ndim() {
            return Err(Error::shape(
                op,
                format!("cannot broadcast shape {:?} to {shape:?}", self.shape),
            ));
        }
        checked_numel(op, shape)?;
        let lead = shape.len() - self.ndim();
        let mut strides = vec![0isize; shape.len()];
        for i in 0..self.ndim() {
            let (d, t) = (self.shape[i], shape[lead + i]);
            strides[lead + i] = if d == t {
                self.strides[i]
            } else if d == 1 {
                0
            } else {
                return Err(Error::shape(
                    op,
                    format!(
                        "cannot broadcast shape {:?} to {shape:?} (dim {i}: {d} vs {t})",
                        self.shape
                    ),
                ));
            };
        }
        Ok(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }

    /// Reorder dims; `perm` must be a permutation of `0..ndim` (negative entries allowed).
    pub fn permute(&self, op: &str, perm: &[isize]) -> Result<Layout> {
        let n = self.ndim();
        if perm.len() != n {
            return Err(Error::invalid(
                op,
                format!("permutation {perm:?} has {} entries, tensor has rank {n}", perm.len()),
            ));
        }
        let mut seen = vec![false; n];
        let mut shape = Vec::with_capacity(n);
        let mut strides = Vec::with_capacity(n);
        for &p in perm {
            let a = normalize_axis(op, p, n)?;
            if std::mem::replace(&mut seen[a], true) {
                return Err(Error::invalid(op, format!("permutation {perm:?} repeats axis {a}")));
            }
            shape.push(self.shape[a]);
            strides.push(self.strides[a]);
        }
        Ok(Layout { shape, strides, offset: self.offset })
    }

    /// Swap two axes.
    pub fn transpose(&self, op: &str, a: isize, b: isize) -> Result<Layout> {
        let n = self.ndim();
        let (a, b) = (normalize_axis(op, a, n)?, normalize_axis(op, b, n)?);
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        Ok(l)
    }

    /// Python-style slice along `axis`: `start:stop:step` with negative indices and clamping.
    pub fn slice(
        &self,
        op: &str,
        axis: isize,
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    ) -> Result<Layout> {
        let ax = normalize_axis(op, axis, self.ndim())?;
        if step == 0 {
            return Err(Error::invalid(op, "slice step cannot be zero"));
        }
        let len = self.shape[ax] as isize;
        // Same algorithm as CPython's PySlice_AdjustIndices.
        let adjust = |v: Option<isize>, default: isize, lo: isize, hi: isize| match v {
            None => default,
            Some(v) if v < 0 => (v + len).max(lo),
            Some(v) => v.min(hi),
        };
        let (start, stop) = if step > 0 {
            (adjust(start, 0, 0, len), adjust(stop, len, 0, len))
        } else {
            (adjust(start, len - 1, -1, len - 1), adjust(stop, -1, -1, len - 1))
        };
        let count = if step > 0 {
            if stop > start {
                (stop - start + step - 1) / step
            } else {
                0
            }
        } else if start > stop {
            (start - stop + (-step) - 1) / (-step)
        } else {
            0
        };
        let mut l = self.clone();
        if count > 0 {
            l.offset = (self.offset as isize + start * self.strides[ax]) as usize;
        }
        l.shape[ax] = count as usize;
        l.strides[ax] = self.strides[ax] * step;
        Ok(l)
    }

    /// Pick index `i` along `axis`, removing that axis.
    pub fn select(&self, op: &str, axis: isize, index: isize) -> Result<Layout> {
        let ax = normalize_axis(op, axis, self.ndim())?;
        let len = self.shape[ax] as isize;
        let i = if index < 0 { index + len } else { index };
        if i < 0 || i >= len {
            return Err(Error::invalid(
                op,
                format!("index {index} is out of bounds for axis {ax} with size {len}"),
            ));
        }
        let mut l = self.clone();
        l.offset = (self.offset as isize + i * self.strides[ax]) as usize;
        l.shape.remove(ax);
        l.strides.remove(ax);
        Ok(l)
    }

    /// A view with a new shape over the same elements, if the strides allow it without a copy
    /// (PyTorch's `view` rule); `None` means the caller must copy first.
    pub fn reshape_view(&self, shape: &[usize]) -> Option<Layout> {
        if numel(shape) != self.numel() {
            return None;
        }
        // Empty views hold no elements: any shape of zero elements views them (and the
        // stride walk below could overflow on the huge dims an empty shape may carry).
        if self.is_contiguous() || self.numel() == 0 {
            let mut l = Layout::contiguous(shape);
            l.offset = self.offset;
            return Some(l);
        }
        // PyTorch's computeStride: walk old dims from the innermost, grouping runs that are
        // contiguous with each other ("chunks"); each chunk must be split exactly by new dims.
        let (old_shape, old_strides) = (&self.shape, &self.strides);
        let mut new_strides = vec![0isize; shape.len()];
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last()?;
        let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            let chunk_ends = tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel as isize * chunk_base_stride);
            if chunk_ends {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    new_strides[view_d as usize] = view_numel as isize * chunk_base_stride;
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout { shape: shape.to_vec(), strides: new_strides, offset: self.offset })
    }

    /// The layout of the innermost rows' first elements: every dim but the last (a 0-d layout
    /// stays 0-d). `row_starts().offsets()` walks a layout a whole row at a time.
    pub fn row_starts(&self) -> Layout {
        let k = self.ndim().saturating_sub(1);
        Layout {
            shape: self.shape[..k].to_vec(),
            strides: self.strides[..k].to_vec(),
            offset: self.offset,
        }
    }

    /// Element offsets in row-major logical order.
    pub fn offsets(&self) -> OffsetIter<'_> {
        OffsetIter {
            layout: self,
            index: vec![0; self.ndim()],
            next: self.offset as isize,
            remaining: self.numel(),
        }
    }
}

/// Iterator over the buffer offsets of a layout in logical order; odometer-style so the cost per
/// element is one add in the common case.
pub struct OffsetIter<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: isize,
    remaining: usize,
}

impl Iterator for OffsetIter<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let cur = self.next as usize;
        let (shape, strides) = (&self.layout.shape, &self.layout.strides);
        for d in (0..shape.len()).rev() {
            self.index[d] += 1;
            self.next += strides[d];
            if self.index[d] < shape[d] {
                break;
            }
            self.next -= strides[d] * shape[d] as isize;
            self.index[d] = 0;
        }
        Some(cur)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for OffsetIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn offs(l: &Layout) -> Vec<usize> {
        l.offsets().collect()
    }

    #[test]
    fn broadcast_table() {
        let ok: &[(&[usize], &[usize], &[usize])] = &[
            (&[2, 3], &[3], &[2, 3]),
            (&[2, 1], &[1, 3], &[2, 3]),
            (&[], &[4], &[4]),
            (&[5, 1, 4], &[3, 1], &[5, 3, 4]),
            (&[0, 3], &[1, 3], &[0, 3]),
        ];
        for (a, b, want) in ok {
            assert_eq!(broadcast_shapes("t", a, b).unwrap(), *want);
        }
        let e = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[add] shapes [2, 3] and [4] cannot be broadcast together (dim 1: 3 vs 4)"
        );
    }

    #[test]
    fn views_match_hand_derived_offsets() {
        let l = Layout::contiguous(&[2, 3]);
        assert_eq!(offs(&l.transpose("t", 0, 1).unwrap()), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(offs(&l.slice("s", 1, Some(2), None, -1).unwrap()), vec![2, 1, 0, 5, 4, 3]);
        assert_eq!(offs(&l.slice("s", 1, None, None, 2).unwrap()), vec![0, 2, 3, 5]);
        assert_eq!(offs(&l.slice("s", -1, Some(-2), Some(100), 1).unwrap()), vec![1, 2, 4, 5]);
        assert_eq!(offs(&l.select("s", 0, -1).unwrap()), vec![3, 4, 5]);
        let b = Layout::contiguous(&[3]).broadcast_to("b", &[2, 3]).unwrap();
        assert_eq!(offs(&b), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(l.slice("s", 0, Some(5), Some(9), 1).unwrap().numel(), 0);
        // Row starts: the offset of each innermost row, in order.
        assert_eq!(offs(&l.transpose("t", 0, 1).unwrap().row_starts()), vec![0, 1, 2]);
        assert_eq!(offs(&b.row_starts()), vec![0, 0]);
        assert_eq!(offs(&Layout::contiguous(&[]).row_starts()), vec![0]);
    }

    #[test]
    fn reshape_view_rules() {
        let l = Layout::contiguous(&[4, 6]);
        assert_eq!(l.reshape_view(&[2, 2, 6]).unwrap().strides, vec![12, 6, 1]);
        let t = l.transpose("t", 0, 1).unwrap(); // [6,4] strides [1,6]
        assert!(t.reshape_view(&[24]).is_none());
        assert_eq!(t.reshape_view(&[2, 3, 4]).unwrap().strides, vec![3, 1, 6]);
        let s = l.slice("s", 1, None, None, 2).unwrap(); // [4,3] strides [6,2]
        assert_eq!(s.reshape_view(&[4, 3, 1]).unwrap().strides[..2], [6, 2]);
        assert_eq!(s.reshape_view(&[12]).unwrap().strides, vec![2]); // uniform stride 2
        let r = l.slice("s", 0, None, None, 2).unwrap(); // [2,6] strides [12,1]: rows have gaps
        assert!(r.reshape_view(&[12]).is_none());
        assert_eq!(r.reshape_view(&[2, 2, 3]).unwrap().strides, vec![12, 3, 1]);
        assert!(l.reshape_view(&[5, 5]).is_none());
    }

    #[test]
    fn sizes_are_checked_not_wrapped() {
        let big = 1usize << 32;
        let e = checked_numel("zeros", &[big, big]).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Shape);
        assert!(e.to_string().starts_with("[zeros] shape [4294967296, 4294967296]"), "{e}");
        assert_eq!(checked_numel("t", &[big, big, 0]).unwrap(), 0);
        assert_eq!(checked_numel("t", &[]).unwrap(), 1);
        assert!(checked_numel("t", &[1 << 62, 2]).is_err(), "over isize::MAX");
        assert_eq!(checked_nbytes("t", &[1 << 40, 2, 3], 4).unwrap(), 24 << 40);
        assert!(checked_nbytes("t", &[1 << 61], 8).is_err());
        assert_eq!(numel(&[big, big]), usize::MAX, "unchecked numel saturates");
        assert!(Layout::contiguous(&[2]).broadcast_to("expand", &[big, big, 2]).is_err());
        assert!(checked_mul("conv2d", "padded height", usize::MAX, 2).is_err());
        assert!(checked_add("conv2d", "padded height", usize::MAX, 1).is_err());
    }

    proptest::proptest! {
        /// Random shapes with huge dims: sizes and views never panic, and a shape that passes
        /// the check has a product that really fits.
        #[test]
        fn huge_shapes_never_panic(
            dims in proptest::collection::vec(
                proptest::prop_oneof![0usize..5, 1usize << 20..1usize << 34, proptest::num::usize::ANY],
                0..6,
            ),
            elem in proptest::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            let exact = if dims.contains(&0) {
                Some(0)
            } else {
                dims.iter().try_fold(1u128, |a, &d| a.checked_mul(d as u128))
            };
            match checked_numel("t", &dims) {
                Ok(n) => proptest::prop_assert_eq!(Some(n as u128), exact),
                Err(_) => proptest::prop_assert!(exact.is_none_or(|v| v > MAX_SIZE as u128)),
            }
            let _ = checked_nbytes("t", &dims, elem);
            let _ = numel(&dims);
            let l = Layout::contiguous(&dims);
            let _ = (l.is_contiguous(), l.span());
            if let Ok(b) = Layout::contiguous(&[1]).broadcast_to("t", &dims) {
                let _ = (b.span(), b.is_contiguous(), b.reshape_view(&[b.numel()]));
            }
        }
    }

    #[test]
    fn axis_errors_name_op() {
        assert!(normalize_axis("sum", 2, 2).unwrap_err().to_string().starts_with("[sum] axis 2"));
        assert_eq!(normalize_axis("sum", -1, 3).unwrap(), 2);
        assert_eq!(normalize_axis("sum", 0, 0).unwrap(), 0);
    }
}
