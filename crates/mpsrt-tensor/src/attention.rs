//! Fused scaled-dot-product attention: `softmax(q·kᵀ·scale + mask, causal) · v` per
//! (batch, head) without materializing the score matrix on the GPU
//! (`mpsrt_kernels::attention`), with the CPU reference in `cpu/attention.rs`.
//!
//! Shapes: `q [B, Hq, Sq, D]`, `k [B, Hkv, Skv, D]`, `v [B, Hkv, Skv, Dv]` (any strides, so
//! packed-head `[B, S, H·D]` inputs are passed as permuted views without a copy), `Hq` a
//! multiple of `Hkv` (grouped-query heads: query head `h` uses kv head `h / (Hq / Hkv)`), an
//! optional mask broadcastable to `[B, Hq, Sq, Skv]` — float (added to the scaled scores) or
//! bool (`true` attends) — and a causal bound `key <= query + offset`. A query row that can
//! attend no key gives zeros (the ONNX `Attention` reference), not NaN. Output: `q`'s dtype
//! (f32 or f16; arithmetic in f32), `[B, Hq, Sq, Dv]` or, with `seq_major`, `[B, Sq, Hq, Dv]`
//! (the packed-head layout, reshaped for free to `[B, Sq, Hq·Dv]`).

use crate::elementwise::same_place;
use crate::{cpu, gpu, Scalar, Tensor};
use mpsrt_core::{DType, Error, Place, Result};

const OP: &str = "scaled_dot_product_attention";

/// Options of [`scaled_dot_product_attention`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SdpaOptions {
    /// Multiplies `q·kᵀ` (usually `1 / sqrt(D)`).
    pub scale: f64,
    /// `Some(offset)`: query `i` may attend key `j` only if `j <= i + offset` (0 for plain
    /// causal attention, the past length with a KV cache).
    pub causal_offset: Option<i64>,
    /// Output `[B, Sq, Hq, Dv]` instead of `[B, Hq, Sq, Dv]`.
    pub seq_major: bool,
}

/// The validated problem: dims and the mask as an additive float tensor broadcast to
/// `[B, Hq, Sq, Skv]` (a stride-0 view).
pub(crate) struct Sdpa<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: Option<Tensor>,
    pub dims: [usize; 7],
    pub opts: SdpaOptions,
}

impl Sdpa<'_> {
    /// `(B, Hq, Hkv, Sq, Skv, D, Dv)`.
    pub fn dims(&self) -> [usize; 7] {
        self.dims
    }
}

fn dims4(x: &Tensor, what: &str) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(x.shape())
        .map_err(|_| Error::shape(OP, format!("{what} must be 4-D, got shape {:?}", x.shape())))
}

/// Fused attention; see the module documentation for shapes and semantics.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    opts: SdpaOptions,
) -> Result<Tensor> {
    let mut all = vec![q, k, v];
    all.extend(mask);
    let place = same_place(OP, &all)?;
    let dt = q.dtype();
    if !matches!(dt, DType::F32 | DType::F16) || k.dtype() != dt || v.dtype() != dt {
        return Err(Error::dtype(
            OP,
            format!(
                "q, k and v must share dtype float32 or float16, got {}, {} and {}",
                dt,
                k.dtype(),
                v.dtype()
            ),
        ));
    }
    let [b, hq, sq, d] = dims4(q, "q")?;
    let [kb, hkv, skv, kd] = dims4(k, "k")?;
    let [vb, vh, vs, dv] = dims4(v, "v")?;
    if kb != b || vb != b || kd != d || vh != hkv || vs != skv {
        return Err(Error::shape(
            OP,
            format!(
                "q {:?}, k {:?} and v {:?} do not match: expected k [{b}, Hkv, Skv, {d}] and \
                 v [{b}, Hkv, Skv, Dv]",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape(
            OP,
            format!("q heads ({hq}) must be a positive multiple of kv heads ({hkv})"),
        ));
    }
    if !opts.scale.is_finite() {
        return Err(Error::invalid(OP, format!("scale must be finite, got {}", opts.scale)));
    }
    let full = [b, hq, sq, skv];
    let mask = match mask {
        None => None,
        Some(m) => {
            let m = match m.dtype() {
                DType::Bool => {
                    crate::where_scalar(m, Scalar::F(0.0), Scalar::F(f64::NEG_INFINITY), dt)?
                }
                DType::F32 | DType::F16 => m.clone(),
                other => m.astype(other.to_float())?,
            };
            let m = if m.dtype() == DType::F64 { m.astype(DType::F32)? } else { m };
            Some(m.expand(&full).map_err(|_| {
                Error::shape(
                    OP,
                    format!(
                        "mask {:?} does not broadcast to [B, Hq, Sq, Skv] = {full:?}",
                        m.shape()
                    ),
                )
            })?)
        }
    };
    let p = Sdpa { q, k, v, mask, dims: [b, hq, hkv, sq, skv, d, dv], opts };
    let y = match place {
        Place::Cpu => cpu::attention::sdpa(&p)?,
        Place::Gpu(i) => gpu::attention::sdpa(i, &p)?,
    };
    Ok(y)
}

/// Whether f16 `q`, `k`, `v` (4-D views as [`scaled_dot_product_attention`] takes them, with a
/// mask of `mask` dtype) would run on the GPU's matrix units (`mpsrt_kernels::attention_coop`):
/// the engine composes f16 attention that would not, since the scalar kernels are slower than
/// the composition there (H100, ninth session: tiled f16 117 us against 73 us per BERT-base
/// layer). False on the CPU and for other dtypes.
pub fn sdpa_on_matrix_units(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<DType>) -> bool {
    let (Place::Gpu(i), [b, hq, sq, d], [_, hkv, skv, _], [.., dv]) =
        (q.place(), q.shape(), k.shape(), v.shape())
    else {
        return false;
    };
    q.dtype() == DType::F16
        && gpu::attention::takes_matrix_units(
            i,
            [*b, *hq, *hkv, *sq, *skv, *d, *dv],
            [q, k, v],
            mask,
        )
}

/// Whether the GPU kernel takes this problem on device `index` (head sizes ≤ 256 that fit its
/// workgroup memory, operands within one storage binding); callers with a composed fallback
/// (the engine's `Attention`) ask before choosing the fused route. Always true on the CPU.
pub fn sdpa_fusable(place: Place, dtype: DType, d: usize, dv: usize) -> bool {
    match place {
        Place::Cpu => matches!(dtype, DType::F32 | DType::F16),
        Place::Gpu(i) => gpu::attention::plan(i, dtype, d, dv, Some(DType::F32)).is_some(),
    }
}
