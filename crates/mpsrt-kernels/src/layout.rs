//! Host-side helpers that shape a dispatch: merging dimensions that are contiguous for every
//! operand, so most broadcasts and all contiguous cases reach the kernel with rank 0 or 1.

/// Merge adjacent dims `d, d+1` when every operand can walk them as one dim, and drop size-1
/// dims. `strides[k]` are operand k's strides (in elements) over `shape`; returns the new shape
/// and strides. The output is assumed contiguous over `shape` (it always is for our kernels).
pub fn coalesce(shape: &[usize], strides: &[Vec<isize>]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let keep: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for &d in &keep {
        if let Some(&last) = out_shape.last() {
            // Checked: an empty shape (a 0 dim elsewhere) can carry dims whose products overflow;
            // such dims simply stay apart.
            let merged = last.checked_mul(shape[d]);
            let mergeable = merged.is_some()
                && strides.iter().enumerate().all(|(k, s)| {
                    let walk = isize::try_from(shape[d]).ok().and_then(|n| s[d].checked_mul(n));
                    walk.is_some() && out_strides[k].last().copied() == walk
                });
            if let (true, Some(merged)) = (mergeable, merged) {
                let n = out_shape.len() - 1;
                out_shape[n] = merged;
                for (k, s) in strides.iter().enumerate() {
                    let m = out_strides[k].len() - 1;
                    out_strides[k][m] = s[d];
                }
                continue;
            }
        }
        out_shape.push(shape[d]);
        for (k, s) in strides.iter().enumerate() {
            out_strides[k].push(s[d]);
        }
    }
    (out_shape, out_strides)
}

#[cfg(test)]
mod tests {
    use super::coalesce;

    #[test]
    fn coalesce_never_overflows_on_empty_shapes_with_huge_dims() {
        // [2^40, 2^31, 0] has no elements, but merging its first two dims would overflow.
        let shape = [1usize << 40, 1 << 31, 0];
        let (s, _) = coalesce(&shape, &[vec![0, 0, 1]]);
        assert!(s.contains(&0), "{s:?}");
        let (s, _) = coalesce(&[usize::MAX, 2, 0], &[vec![isize::MAX, 1, 1]]);
        assert!(s.contains(&0), "{s:?}");
    }

    #[test]
    fn coalesce_table() {
        // contiguous 3-D → 1-D
        let (s, st) = coalesce(&[2, 3, 4], &[vec![12, 4, 1], vec![12, 4, 1]]);
        assert_eq!((s, st), (vec![24], vec![vec![1], vec![1]]));
        // row broadcast: [2,3] + [3] → cannot merge the broadcast operand's dims
        let (s, st) = coalesce(&[2, 3], &[vec![3, 1], vec![0, 1]]);
        assert_eq!((s, st), (vec![2, 3], vec![vec![3, 1], vec![0, 1]]));
        // scalar broadcast over contiguous → 1-D with stride 0
        let (s, st) = coalesce(&[4, 5], &[vec![5, 1], vec![0, 0]]);
        assert_eq!((s, st), (vec![20], vec![vec![1], vec![0]]));
        // size-1 dims vanish; all-ones shape becomes rank 0
        let (s, st) = coalesce(&[1, 1], &[vec![1, 1]]);
        assert_eq!((s, st), (vec![], vec![vec![]]));
        // transposed operand keeps two dims
        let (s, _) = coalesce(&[3, 4], &[vec![4, 1], vec![1, 3]]);
        assert_eq!(s, vec![3, 4]);
    }
}
