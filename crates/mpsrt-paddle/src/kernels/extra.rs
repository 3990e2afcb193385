//! Structure, indexing and sampling kernels: `stack`, `split` / `split_with_num` (list
//! outputs), `argmax`, `prod`, `embedding` (+ grad), `dropout` (+ grad), `conv2d_transpose` and
//! `max_pool2d_with_index` (+ grad), each composed from mpsrt-tensor ops like the other kernels.
//! Signatures follow Paddle 3.3's `paddle/phi/kernels/*.h` exactly (the variadic entry point
//! depends on it).

use super::grad::place;
use super::nn::{
    check4, from_nchw, nhwc, one_hot_filter, paddings, pair, scatter_to_input, to_nchw,
};
use super::ops::{as_words, axes, store_host};
use super::{kernel, vty, Call, KernelDef};
use crate::capi;
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_tensor::{self as mt, Tensor};
use std::ffi::c_void;

const F: &[DType] = &[DType::F32, DType::F16];
const FI: &[DType] = &[DType::F32, DType::F16, DType::I32];
const FIB: &[DType] = &[DType::F32, DType::F16, DType::I32, DType::Bool];

/// `stack(x[], axis) -> out`.
fn stack(c: &Call) -> Result<()> {
    let xs = c.input_list(0)?;
    let refs: Vec<&Tensor> = xs.iter().collect();
    c.store(0, &mt::stack(&refs, c.int(0) as isize)?)
}

/// Both splits: the part sizes are the outputs' extents along `axis` (InferMeta resolved the
/// sections, `-1` included).
fn split_parts(c: &Call, axis: i64) -> Result<()> {
    let x = c.input(0)?;
    let nd = x.ndim() as i64;
    let ax = if axis < 0 { axis + nd } else { axis };
    if ax < 0 || ax >= nd {
        return Err(Error::invalid(c.name, format!("axis {axis} for a {nd}-D input")));
    }
    let mut sizes = Vec::with_capacity(c.out_lists[0].len());
    for &o in &c.out_lists[0] {
        if o.is_null() {
            return Err(Error::invalid(c.name, "an output of the list is missing"));
        }
        sizes.push(capi::meta(c.name, o)?.dims[ax as usize]);
    }
    for (j, p) in mt::split(&x, &sizes, ax as isize)?.iter().enumerate() {
        c.store_list(0, j, p)?;
    }
    Ok(())
}

/// `split(x, sections, axis) -> out[]`.
fn split(c: &Call) -> Result<()> {
    split_parts(c, c.scalar(1).as_i64())
}

/// `split_with_num(x, num, axis) -> out[]`.
fn split_with_num(c: &Call) -> Result<()> {
    split_parts(c, c.scalar(1).as_i64())
}

/// `argmax(x, axis, keepdims, flatten, dtype) -> out`: int32 indices on the device; an int64
/// result (Paddle's default) is widened on the host.
fn argmax(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let r = if c.bool(2) || x.ndim() == 0 {
        mt::argmax(&x, None, false)?
    } else {
        mt::argmax(&x, Some(c.scalar(0).as_i64() as isize), c.bool(1))?
    };
    let want = c.out_dtype(0)?;
    if want.gpu_supported() {
        return c.store(0, &r);
    }
    store_host(c, 0, &r.to(Place::Cpu)?.astype(want)?)
}

/// `prod(x, dims, keep_dim, reduce_all) -> out`.
fn prod(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let ax = if c.bool(2) { None } else { axes(&x, &c.ints(0)) };
    let r = if x.ndim() == 0 { x.clone() } else { mt::prod(&x, ax.as_deref(), c.bool(1))? };
    c.store(0, &r)
}

/// Indices (int32 or int64) read back to the host: the lookup needs them there to check the
/// range (one readback per call, like mpsrt's own `gather`).
fn host_ids(op: &str, t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::I64 => {
            let w: Vec<i32> = as_words(t)?.contiguous()?.to_vec()?;
            Ok(w.chunks(2)
                .map(|p| (p[0] as u32 as u64 | ((p[1] as u32 as u64) << 32)) as i64)
                .collect())
        }
        DType::I32 => Ok(t.contiguous()?.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        d => Err(Error::dtype(op, format!("ids must be int32 or int64, got {d}"))),
    }
}

/// `embedding(x, weight, padding_idx) -> out`: rows of `weight` gathered on the device; rows
/// of `padding_idx` are zero (Paddle: `-1` means none, other negatives count from the end).
fn embedding(c: &Call) -> Result<()> {
    let (ids, w) = (c.input(0)?, c.input(1)?);
    if w.ndim() != 2 {
        return Err(Error::shape(c.name, format!("weight must be 2-D, got {:?}", w.shape())));
    }
    let rows = w.shape()[0] as i64;
    let v = host_ids(c.name, &ids)?;
    if let Some(bad) = v.iter().find(|&&i| i < 0 || i >= rows) {
        return Err(Error::invalid(c.name, format!("id {bad} is outside [0, {rows})")));
    }
    let pad = match c.int(0) {
        -1 => None,
        p if p < 0 => Some(p + rows),
        p => Some(p),
    };
    let idx: Vec<i32> = v.iter().map(|&i| i as i32).collect();
    let idx = Tensor::from_slice(&idx, &[idx.len()], Place::Cpu)?;
    let mut out = mt::gather(&w, &idx, 0)?;
    if let Some(p) = pad.filter(|p| v.contains(p)) {
        let keep: Vec<f32> = v.iter().map(|&i| if i == p { 0.0 } else { 1.0 }).collect();
        let keep = Tensor::from_slice(&keep, &[v.len(), 1], place())?.astype(w.dtype())?;
        out = mt::multiply(&out, &keep)?;
    }
    c.store(0, &out)
}

/// `embedding_grad(x, weight, out_grad, padding_idx) -> weight_grad`: a scatter-add of the
/// rows of `out_grad` by id, as one product on the device: a 0/1 selection matrix (distinct ids
/// × lookups, built on the host from the read-back ids) times `out_grad` sums each id's rows;
/// a gather spreads those sums over the vocabulary (zero rows for ids not looked up and for
/// `padding_idx`).
fn embedding_grad(c: &Call) -> Result<()> {
    let (ids, dy) = (c.input(0)?, c.input(2)?);
    let ws = c.in_shape(1)?;
    if ws.len() != 2 {
        return Err(Error::shape(c.name, format!("weight must be 2-D, got {ws:?}")));
    }
    let (rows, dim) = (ws[0], ws[1]);
    let v = host_ids(c.name, &ids)?;
    if let Some(bad) = v.iter().find(|&&i| i < 0 || i >= rows as i64) {
        return Err(Error::invalid(c.name, format!("id {bad} is outside [0, {rows})")));
    }
    let pad = match c.int(0) {
        -1 => None,
        p if p < 0 => Some(p + rows as i64),
        p => Some(p),
    };
    let mut uniq: Vec<i64> = v.iter().copied().filter(|&i| Some(i) != pad).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let (u, n) = (uniq.len(), v.len());
    if u * n > 1 << 24 {
        return Err(Error::unsupported(
            c.name,
            format!("{n} lookups of {u} distinct ids (the selection matrix would hold {u}x{n} floats; at most 2^24)"),
        ));
    }
    let mut table = mt::zeros(&[1, dim], DType::F32, place())?;
    if u > 0 {
        let mut sel = vec![0f32; u * n];
        for (j, &i) in v.iter().enumerate() {
            if let Ok(r) = uniq.binary_search(&i) {
                sel[r * n + j] = 1.0;
            }
        }
        let sel = Tensor::from_slice(&sel, &[u, n], place())?;
        let dy2 = dy.astype(DType::F32)?.reshape(&[n as isize, dim as isize])?;
        table = mt::concat(&[&table, &mt::matmul(&sel, &dy2)?], 0)?;
    }
    let mut map = vec![0i32; rows];
    for (r, &i) in uniq.iter().enumerate() {
        map[i as usize] = r as i32 + 1;
    }
    let map = Tensor::from_slice(&map, &[rows], Place::Cpu)?;
    c.store(0, &mt::gather(&table, &map, 0)?)
}

/// Dropout's scale for the kept elements.
fn keep_scale(p: f64, upscale: bool) -> f64 {
    if upscale && p < 1.0 {
        1.0 / (1.0 - p)
    } else {
        1.0
    }
}

/// `dropout(x, seed_tensor?, p, is_test, mode, seed, fix_seed) -> (out, mask)`. Inference:
/// `upscale_in_train` passes `x` through, `downgrade_in_infer` scales by `1 - p`. Training
/// keeps each element with probability `1 - p` (mpsrt's generator; a fixed seed reseeds it)
/// and writes the uint8 mask the backward pass reads.
fn dropout(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let p = c.scalar(0).as_f64();
    let upscale = c.string(2) == "upscale_in_train";
    if c.bool(1) {
        let y = if upscale { x.contiguous()? } else { mt::multiply_scalar(&x, 1.0 - p)? };
        return c.store(0, &y);
    }
    if c.bool(4) && c.int(3) != 0 {
        mt::manual_seed(c.int(3) as u64);
    }
    let keep = mt::greater_equal_scalar(&mt::rand(x.shape(), DType::F32, place())?, p)?;
    let kept = mt::multiply(&x, &keep.astype(x.dtype())?)?;
    c.store(0, &mt::multiply_scalar(&kept, keep_scale(p, upscale))?)?;
    if c.wants(1) {
        c.store(1, &keep)?;
    }
    Ok(())
}

/// `dropout_grad(mask, out_grad, p, is_test, mode) -> x_grad`.
fn dropout_grad(c: &Call) -> Result<()> {
    let (mask, dy) = (c.input(0)?, c.input(1)?);
    let p = c.scalar(0).as_f64();
    let upscale = c.string(2) == "upscale_in_train";
    let dx = if c.bool(1) {
        if upscale {
            dy.contiguous()?
        } else {
            mt::multiply_scalar(&dy, 1.0 - p)?
        }
    } else {
        let m = mask.astype(dy.dtype())?;
        mt::multiply_scalar(&mt::multiply(&dy, &m)?, keep_scale(p, upscale))?
    };
    c.store(0, &dx)
}

/// `conv2d_transpose(x, filter, strides, paddings, output_padding, output_size,
/// padding_algorithm, groups, dilations, data_format) -> out`: the transposed convolution
/// without padding, then cropped by the paddings (and zero-extended by any output padding) to
/// the size InferMeta gave the output.
fn conv2d_transpose(c: &Call) -> Result<()> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    check4(c.name, &x, "input")?;
    check4(c.name, &w, "filter")?;
    let nhwc = nhwc(c, 7)?;
    let x = to_nchw(x, nhwc)?;
    let s = pair(&c.ints(0), "strides", c.name)?;
    let d = pair(&c.ints(6), "dilations", c.name)?;
    let hw = [x.shape()[2], x.shape()[3]];
    let k = [w.shape()[2], w.shape()[3]];
    let ([pt, _, pl, _], d) = paddings(c.name, &c.ints(1), c.string(4), hw, k, s, d)?;
    let opts = mt::ConvTranspose2dOptions {
        stride: s,
        padding: [0, 0],
        output_padding: [0, 0],
        dilation: d,
        groups: c.int(5).max(1) as usize,
    };
    let canvas = mt::conv_transpose2d(&x, &w, None, &opts)?;
    let o = c.out_shape(0)?;
    let (oh, ow) = if nhwc { (o[1], o[2]) } else { (o[2], o[3]) };
    let (hc, wc) = (canvas.shape()[2], canvas.shape()[3]);
    let y = pad_ltrb(&canvas, [pt, pl], [hc, wc], [oh, ow])?;
    c.store(0, &from_nchw(y, nhwc)?)
}

/// Crop `[top, left]` off an NCHW canvas of extents `[hc, wc]` and cut (or zero-extend) its
/// end so it measures `[oh, ow]`.
fn pad_ltrb(
    t: &Tensor,
    [pt, pl]: [usize; 2],
    [hc, wc]: [usize; 2],
    [oh, ow]: [usize; 2],
) -> Result<Tensor> {
    let end = |o: usize, c: usize, p: usize| o as isize - (c as isize - p as isize);
    mt::pad(
        t,
        &[(0, 0), (0, 0), (-(pt as isize), end(oh, hc, pt)), (-(pl as isize), end(ow, wc, pl))],
        mt::PadMode::Constant(0.0),
    )
}

/// `max_pool2d_with_index(x, kernel_size, strides, paddings, global_pooling, adaptive,
/// ceil_mode) -> (out, mask)`: the mask holds each maximum's flat `h·W + w` index in its plane
/// (first maximum on ties), as Paddle's CPU kernel.
fn max_pool2d_with_index(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    check4(c.name, &x, "input")?;
    let (h, w) = (x.shape()[2], x.shape()[3]);
    let (out, mask) = if c.bool(4) {
        mt::adaptive_max_pool2d_with_indices(&x, pair(&c.ints(0), "kernel_size", c.name)?)?
    } else {
        let (kernel, stride, padding) = if c.bool(3) {
            ([h, w], [h, w], [0, 0])
        } else {
            (
                pair(&c.ints(0), "kernel_size", c.name)?,
                pair(&c.ints(1), "strides", c.name)?,
                pair(&c.ints(2), "paddings", c.name)?,
            )
        };
        let opts = mt::Pool2dOptions {
            kernel,
            stride: Some(stride),
            padding,
            dilation: [1, 1],
            ceil_mode: c.bool(5),
            count_include_pad: false,
        };
        mt::max_pool2d_with_indices(&x, &opts)?
    };
    c.store(0, &out)?;
    c.store(1, &mask)
}

/// `max_pool2d_with_index_grad(x, mask, dout, kernel_size, strides, paddings, global_pooling,
/// adaptive, ceil_mode) -> dx`: each output's gradient is added to the input element its mask
/// names (flat `h·W + w` in its plane). Regular windows turn the mask into a window-local
/// offset and scatter through a depthwise one-hot `conv_transpose2d` (as `pool2d_grad`);
/// windows covering most of the plane (global, adaptive with sizes that do not divide) use a
/// per-plane selection product `dout · onehot(mask)`.
fn max_pool2d_with_index_grad(c: &Call) -> Result<()> {
    let xs = c.in_shape(0)?;
    let (mask, dy) = (c.input(1)?, c.input(2)?);
    check4(c.name, &dy, "output gradient")?;
    if xs.len() != 4 || mask.shape() != dy.shape() {
        return Err(Error::shape(
            c.name,
            format!("x {xs:?}, mask {:?} and dout {:?} (expected NCHW)", mask.shape(), dy.shape()),
        ));
    }
    let (n, ch, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ow) = (dy.shape()[2], dy.shape()[3]);
    if n * ch * oh * ow == 0 || h * w == 0 {
        return c.store(0, &mt::zeros(&xs, dy.dtype(), place())?);
    }
    if h * w >= 1 << 24 {
        return Err(Error::unsupported(c.name, format!("a {h}x{w} plane (indices past 2^24)")));
    }
    let geo = if c.bool(3) {
        Some(([h, w], [h, w], [0, 0]))
    } else if c.bool(4) {
        (h % oh == 0 && w % ow == 0).then_some(([h / oh, w / ow], [h / oh, w / ow], [0, 0]))
    } else {
        Some((
            pair(&c.ints(0), "kernel_size", c.name)?,
            pair(&c.ints(1), "strides", c.name)?,
            pair(&c.ints(2), "paddings", c.name)?,
        ))
    };
    let m = mask.astype(DType::F32)?;
    let dx = match geo {
        Some((k, s, p)) if h * w > 8 * k[0] * k[1] => pool_index_scatter(&m, &dy, [h, w], k, s, p)?,
        _ => pool_index_select(&m, &dy, [n, ch, h, w])?,
    };
    c.store(0, &dx)
}

/// Regular windows: the mask's window-local offset `(row - top)·kw + (col - left)` picks one
/// of `kh·kw` gradient planes per output, which a depthwise `conv_transpose2d` with one-hot
/// filters adds onto the padded canvas, then cropped to the input.
fn pool_index_scatter(
    m: &Tensor,
    dy: &Tensor,
    [h, w]: [usize; 2],
    [kh, kw]: [usize; 2],
    [sh, sw]: [usize; 2],
    [pt, pl]: [usize; 2],
) -> Result<Tensor> {
    let (n, ch, oh, ow) = (dy.shape()[0], dy.shape()[1], dy.shape()[2], dy.shape()[3]);
    let dt = dy.dtype();
    // Row and column of each index (+0.5: far from the integer boundaries in f32).
    let row = mt::floor(&mt::divide_scalar(&mt::add_scalar(m, 0.5)?, w as f64)?)?;
    let col = mt::subtract(m, &mt::multiply_scalar(&row, w as f64)?)?;
    let top = mt::arange(0.0, oh as f64, 1.0, DType::F32, place())?;
    let top = mt::add_scalar(&mt::multiply_scalar(&top, sh as f64)?, -(pt as f64))?;
    let left = mt::arange(0.0, ow as f64, 1.0, DType::F32, place())?;
    let left = mt::add_scalar(&mt::multiply_scalar(&left, sw as f64)?, -(pl as f64))?;
    let dr = mt::subtract(&row, &top.reshape(&[1, 1, oh as isize, 1])?)?;
    let dc = mt::subtract(&col, &left.reshape(&[1, 1, 1, ow as isize])?)?;
    let local = mt::add(&mt::multiply_scalar(&dr, kw as f64)?, &dc)?;
    let k = kh * kw;
    let mut parts = Vec::with_capacity(k);
    for t in 0..k {
        parts.push(mt::multiply(&mt::equal_scalar(&local, t as f64)?.astype(dt)?, dy)?);
    }
    let stacked = mt::stack(&parts.iter().collect::<Vec<_>>(), 2)?;
    let src = stacked.reshape(&[n as isize, (ch * k) as isize, oh as isize, ow as isize])?;
    let filt = one_hot_filter(ch, kh, kw, dt)?;
    scatter_to_input(&src, &filt, ch, [h, w], [kh, kw], [sh, sw], [pt, pl])
}

/// Any windows: per plane, `dx = dout · S` with `S[p, i] = (mask[p] == i)`, in chunks of planes
/// that keep `S` near 16M elements.
fn pool_index_select(m: &Tensor, dy: &Tensor, [n, ch, h, w]: [usize; 4]) -> Result<Tensor> {
    let (planes, p, hw) = (n * ch, dy.shape()[2] * dy.shape()[3], h * w);
    let dt = dy.dtype();
    let m = m.reshape(&[planes as isize, p as isize, 1])?;
    let dy = dy.reshape(&[planes as isize, 1, p as isize])?;
    let iota =
        mt::arange(0.0, hw as f64, 1.0, DType::F32, place())?.reshape(&[1, 1, hw as isize])?;
    let step = ((16usize << 20) / (p * hw).max(1)).clamp(1, planes);
    let mut chunks = Vec::with_capacity(planes.div_ceil(step));
    let mut i = 0;
    while i < planes {
        let j = (i + step).min(planes);
        let (lo, hi) = (Some(i as isize), Some(j as isize));
        let sel = mt::equal(&m.slice(0, lo, hi, 1)?, &iota)?.astype(dt)?;
        chunks.push(mt::matmul(&dy.slice(0, lo, hi, 1)?, &sel)?);
        i = j;
    }
    let dx = if chunks.len() == 1 {
        chunks.pop().expect("one chunk")
    } else {
        mt::concat(&chunks.iter().collect::<Vec<_>>(), 0)?
    };
    dx.reshape(&[n as isize, ch as isize, h as isize, w as isize])
}

/// The kernels of this file.
pub fn all() -> Vec<KernelDef> {
    vec![
        kernel!("stack", stack, FIB, [xs: InList, axis: I32, out: Out]),
        kernel!("split", split, FIB, [x: In, sections: IntArray, axis: Scalar, out: OutList]),
        kernel!("split_with_num", split_with_num, FIB, [x: In, num: I32, axis: Scalar, out: OutList]),
        kernel!("argmax", argmax, FI, [x: In, axis: Scalar, keep: Bool, flatten: Bool, dtype: DType, out: Out]),
        kernel!("prod", prod, F, [x: In, dims: IntArray, keep: Bool, all: Bool, out: Out]),
        kernel!("embedding", embedding, F, [ids: In, w: In, padding_idx: I64, out: Out]),
        kernel!("embedding_grad", embedding_grad, F, [ids: In, w: In, dout: In, padding_idx: I64, dw: Out]),
        kernel!("dropout", dropout, F, [x: In, seed_tensor: OptIn, p: Scalar, is_test: Bool, mode: Str, seed: I32, fix_seed: Bool, out: Out, mask: Out]),
        kernel!("dropout_grad", dropout_grad, F, [mask: In, dout: In, p: Scalar, is_test: Bool, mode: Str, dx: Out]),
        kernel!("conv2d_transpose", conv2d_transpose, F, [x: In, w: In, strides: VecI32, pads: VecI32, out_pad: VecI32, out_size: IntArray, algo: Str, groups: I32, dil: VecI32, fmt: Str, out: Out]),
        kernel!("max_pool2d_with_index", max_pool2d_with_index, F, [x: In, ksize: VecI32, strides: VecI32, pads: VecI32, global: Bool, adaptive: Bool, ceil: Bool, out: Out, mask: Out]),
        kernel!("max_pool2d_with_index_grad", max_pool2d_with_index_grad, F, [x: In, mask: In, dout: In, ksize: VecI32, strides: VecI32, pads: VecI32, global: Bool, adaptive: Bool, ceil: Bool, dx: Out]),
    ]
}
