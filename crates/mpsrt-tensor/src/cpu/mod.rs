//! The CPU reference backend: the executable definition of every op's semantics, plus a fast
//! f32 SGEMM path for matmul and convolution (`gemm`) checked against those definitions.

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod elementwise;
mod elementwise_f32;
pub(crate) mod gemm;
mod im2col;
mod math;
pub(crate) mod matmul;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod softmax;

use mpsrt_core::DType;
use std::sync::OnceLock;

/// Worker threads for CPU ops (SGEMM row blocks, im2col rows, pooling planes, elementwise
/// chunks): `MPSRT_CPU_THREADS`, else the machine's parallelism (≤ 16).
pub(crate) fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MPSRT_CPU_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 16)
    })
}

/// The CPU worker pool: `threads()` rayon workers, started on first use. A pool rather than
/// scoped threads per op: spawning OS threads cost ~10-30 µs each per op, which dominated models
/// of hundreds of small ops on many-core machines. `None` if the OS refused the threads (work
/// then runs on the calling thread).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static P: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    P.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads())
            .thread_name(|i| format!("mpsrt-cpu-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// `f(i, chunk)` over `data` split into chunks of `chunk` elements, on the worker pool when
/// there is more than one chunk; results in chunk order.
pub(crate) fn par_chunks<T: Send, R: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) -> R + Sync + Send,
) -> Vec<R> {
    use rayon::prelude::*;
    let chunk = chunk.max(1);
    match pool() {
        Some(p) if data.len() > chunk => {
            p.install(|| data.par_chunks_mut(chunk).enumerate().map(|(i, c)| f(i, c)).collect())
        }
        _ => data.chunks_mut(chunk).enumerate().map(|(i, c)| f(i, c)).collect(),
    }
}

/// A pointer into an output buffer that the tasks of one [`par_for`] share, each writing only
/// its own disjoint range (SGEMM row or column blocks, conv column blocks, concat pieces).
pub(crate) struct SendPtr<T>(pub(crate) *mut T);

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendPtr<T> {}

// SAFETY: handed only to `par_for` tasks that write disjoint ranges of the buffer and read
// nothing another task writes; the buffer outlives them (`par_for` returns after every task).
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above: shared only so that each task can reach its own disjoint range.
unsafe impl<T> Sync for SendPtr<T> {}

/// Runs `f` on one of the CPU worker threads (inline when already on one, or when there is no
/// pool), so the ops it calls split their work with that thread taking a share right away
/// instead of the caller sleeping until workers finish: a model run of hundreds of small CPU
/// steps otherwise pays two thread wake-ups per step (DenseNet-121: 246 steps).
pub fn on_cpu_workers<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Some(p) if threads() > 1 => p.install(f),
        _ => f(),
    }
}

/// `f(j)` for `j in 0..n` on the worker pool (the calling thread when `n <= 1`).
pub(crate) fn par_for(n: usize, f: impl Fn(usize) + Sync + Send) {
    use rayon::prelude::*;
    match pool() {
        Some(p) if n > 1 => p.install(|| (0..n).into_par_iter().for_each(f)),
        _ => (0..n).for_each(f),
    }
}

/// Decode little-endian element bytes of `dtype` into f64s.
pub(crate) fn decode_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    use half::f16;
    let n = bytes.len() / dtype.size().max(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let b = &bytes[i * dtype.size()..(i + 1) * dtype.size()];
        out.push(match dtype {
            DType::Bool | DType::U8 => b[0] as f64,
            DType::I8 => b[0] as i8 as f64,
            DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::I64 => {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64
            }
            DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        });
    }
    out
}
