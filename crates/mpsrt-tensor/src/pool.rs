//! 2-D pooling over NCHW (or CHW) tensors: max/avg with kernel, stride, padding, dilation (max),
//! ceil_mode and count_include_pad; global avg/max; adaptive avg/max with PyTorch's
//! `floor(i·H/OH) .. ceil((i+1)·H/OH)` windows. CPU reference `cpu/pool.rs`, GPU `gpu/pool.rs`.

use crate::{cpu, gpu, Tensor};
use mpsrt_core::{checked_add, checked_mul, checked_numel, Error, Place, Result};

/// Options of `max_pool2d` / `avg_pool2d` (PyTorch's meaning; `stride: None` = kernel size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dOptions {
    pub kernel: [usize; 2],
    pub stride: Option<[usize; 2]>,
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

impl Pool2dOptions {
    /// A `kh × kw` window with stride = kernel, no padding, dilation 1, floor mode,
    /// count_include_pad = true (PyTorch's defaults).
    pub fn new(kh: usize, kw: usize) -> Self {
        Pool2dOptions {
            kernel: [kh, kw],
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: true,
        }
    }
}

/// What a pooling launch computes (shared by the CPU reference and the GPU launch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolGeom {
    pub nc: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub k: [usize; 2],
    pub s: [usize; 2],
    pub p: [usize; 2],
    pub d: [usize; 2],
    pub max: bool,
    pub count_include_pad: bool,
    pub adaptive: bool,
}

/// Check the input and return it as 4-D plus whether a batch dim was added.
fn as_4d(op: &str, x: &Tensor) -> Result<(Tensor, bool)> {
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("expected a float tensor, got {}", x.dtype())));
    }
    match x.ndim() {
        4 => Ok((x.clone(), false)),
        3 => Ok((x.unsqueeze(0)?, true)),
        _ => Err(Error::shape(
            op,
            format!("expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got {:?}", x.shape()),
        )),
    }
}

fn run(op: &str, x: &Tensor, squeeze: bool, g: &PoolGeom) -> Result<Tensor> {
    let s = x.shape();
    let shape = [s[0], s[1], g.oh, g.ow];
    // `adaptive_avg_pool2d(x, 2**40)` asks for 2**80 outputs: an error, not a wrap.
    checked_numel(op, &shape)?;
    let y = match x.place() {
        Place::Cpu => cpu::pool::pool2d(x, &shape, g)?,
        Place::Gpu(d) => gpu::pool::pool2d(op, d, x, &shape, g)?,
    };
    if squeeze {
        y.squeeze(Some(0))
    } else {
        Ok(y)
    }
}

/// Like `run`, max pooling only, also returning the indices.
fn run_indices(op: &str, x: &Tensor, squeeze: bool, g: &PoolGeom) -> Result<(Tensor, Tensor)> {
    let s = x.shape();
    let shape = [s[0], s[1], g.oh, g.ow];
    checked_numel(op, &shape)?;
    let (y, i) = match x.place() {
        Place::Cpu => cpu::pool::max_pool2d_indices(x, &shape, g)?,
        Place::Gpu(d) => gpu::pool::max_pool2d_indices(op, d, x, &shape, g)?,
    };
    if squeeze {
        Ok((y.squeeze(Some(0))?, i.squeeze(Some(0))?))
    } else {
        Ok((y, i))
    }
}

fn pooled(op: &str, x: &Tensor, o: &Pool2dOptions, max: bool) -> Result<Tensor> {
    let (x4, squeeze, g) = pooled_geom(op, x, o, max)?;
    run(op, &x4, squeeze, &g)
}

/// Validated 4-D input, whether a batch dim was added, and the geometry of a windowed pool.
fn pooled_geom(
    op: &str,
    x: &Tensor,
    o: &Pool2dOptions,
    max: bool,
) -> Result<(Tensor, bool, PoolGeom)> {
    let (x4, squeeze) = as_4d(op, x)?;
    let stride = o.stride.unwrap_or(o.kernel);
    let dilation = if max { o.dilation } else { [1, 1] };
    if o.kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            format!(
                "kernel {:?}, stride {stride:?} and dilation {dilation:?} must be positive",
                o.kernel
            ),
        ));
    }
    if (0..2).any(|i| o.padding[i].saturating_mul(2) > o.kernel[i]) {
        return Err(Error::invalid(
            op,
            format!("padding {:?} must be at most half the kernel size {:?}", o.padding, o.kernel),
        ));
    }
    let s = x4.shape();
    let mut out = [0usize; 2];
    for i in 0..2 {
        let len = checked_add(op, "the padded input size", s[2 + i], 2 * o.padding[i])?;
        let ek = checked_mul(op, "the dilated kernel extent", dilation[i], o.kernel[i] - 1)?;
        let ek = checked_add(op, "the dilated kernel extent", ek, 1)?;
        if len < ek {
            return Err(Error::shape(
                op,
                format!(
                    "kernel {:?} (dilation {dilation:?}) is larger than the padded input {:?} \
                     (padding {:?})",
                    o.kernel,
                    &s[2..],
                    o.padding
                ),
            ));
        }
        let span = len - ek;
        let mut n = if o.ceil_mode { span.div_ceil(stride[i]) } else { span / stride[i] } + 1;
        // PyTorch: the last window must start inside the input or the left padding.
        if o.ceil_mode && (n - 1) * stride[i] >= s[2 + i] + o.padding[i] {
            n -= 1;
        }
        out[i] = n;
    }
    let g = PoolGeom {
        nc: s[0] * s[1],
        h: s[2],
        w: s[3],
        oh: out[0],
        ow: out[1],
        k: o.kernel,
        s: stride,
        p: o.padding,
        d: dilation,
        max,
        count_include_pad: o.count_include_pad,
        adaptive: false,
    };
    Ok((x4, squeeze, g))
}

/// Max pooling over (…, H, W); NaN in a window gives NaN.
pub fn max_pool2d(x: &Tensor, opts: &Pool2dOptions) -> Result<Tensor> {
    pooled("max_pool2d", x, opts, true)
}

/// Max pooling that also returns, per output, the flat index `h·W + w` (int32) of its window's
/// maximum within the input plane — the first one on ties, the first NaN where the window holds
/// NaN (Paddle's `return_mask=True`, PyTorch's `return_indices`).
pub fn max_pool2d_with_indices(x: &Tensor, opts: &Pool2dOptions) -> Result<(Tensor, Tensor)> {
    let op = "max_pool2d";
    let (x4, squeeze, g) = pooled_geom(op, x, opts, true)?;
    run_indices(op, &x4, squeeze, &g)
}

/// Average pooling over (…, H, W) (dilation is ignored, as in PyTorch's avg_pool2d).
pub fn avg_pool2d(x: &Tensor, opts: &Pool2dOptions) -> Result<Tensor> {
    pooled("avg_pool2d", x, opts, false)
}

fn adaptive(op: &str, x: &Tensor, size: [usize; 2], max: bool) -> Result<Tensor> {
    let (x4, squeeze, g) = adaptive_geom(op, x, size, max)?;
    run(op, &x4, squeeze, &g)
}

/// [`adaptive_max_pool2d`] that also returns the flat `h·W + w` index (int32) of each maximum,
/// as [`max_pool2d_with_indices`] does.
pub fn adaptive_max_pool2d_with_indices(x: &Tensor, size: [usize; 2]) -> Result<(Tensor, Tensor)> {
    let op = "adaptive_max_pool2d";
    let (x4, squeeze, g) = adaptive_geom(op, x, size, true)?;
    run_indices(op, &x4, squeeze, &g)
}

fn adaptive_geom(
    op: &str,
    x: &Tensor,
    size: [usize; 2],
    max: bool,
) -> Result<(Tensor, bool, PoolGeom)> {
    let (x4, squeeze) = as_4d(op, x)?;
    let s = x4.shape();
    if size.contains(&0) || s[2] == 0 || s[3] == 0 {
        return Err(Error::invalid(
            op,
            format!("need a non-empty H and W and a positive output size, got input {s:?} and output size {size:?}"),
        ));
    }
    let g = PoolGeom {
        nc: s[0] * s[1],
        h: s[2],
        w: s[3],
        oh: size[0],
        ow: size[1],
        k: [1, 1],
        s: [1, 1],
        p: [0, 0],
        d: [1, 1],
        max,
        count_include_pad: false,
        adaptive: true,
    };
    Ok((x4, squeeze, g))
}

/// Adaptive average pooling to `size` = (OH, OW): window i spans
/// `floor(i·H/OH) .. ceil((i+1)·H/OH)`.
pub fn adaptive_avg_pool2d(x: &Tensor, size: [usize; 2]) -> Result<Tensor> {
    adaptive("adaptive_avg_pool2d", x, size, false)
}

/// Adaptive max pooling to `size` = (OH, OW) (same windows as `adaptive_avg_pool2d`).
pub fn adaptive_max_pool2d(x: &Tensor, size: [usize; 2]) -> Result<Tensor> {
    adaptive("adaptive_max_pool2d", x, size, true)
}

/// Mean over H and W, keeping them as 1×1.
pub fn global_avg_pool2d(x: &Tensor) -> Result<Tensor> {
    adaptive("global_avg_pool2d", x, [1, 1], false)
}

/// Max over H and W, keeping them as 1×1.
pub fn global_max_pool2d(x: &Tensor) -> Result<Tensor> {
    adaptive("global_max_pool2d", x, [1, 1], true)
}
