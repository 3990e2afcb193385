//! Importers for spatial resampling: MaxPool, AveragePool, LpPool, their global forms, and
//! Resize/Upsample.

use super::conv::auto_pad;
use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::{
    CoordTransform, KeepAspect, NearestRounding, Op, PoolAttrs, ResizeAttrs, ResizeMode,
};

pub const OPS: &[(&str, Importer)] = &[
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("LpPool", lp_pool),
    ("GlobalAveragePool", global_average_pool),
    ("GlobalMaxPool", global_max_pool),
    ("Resize", resize),
    ("Upsample", resize),
];

fn pool_attrs(cx: &Ctx) -> Result<PoolAttrs> {
    let kernel = cx.usizes("kernel_shape")?;
    if kernel.is_empty() {
        return Err(cx.invalid("attribute \"kernel_shape\" is required"));
    }
    Ok(PoolAttrs {
        kernel,
        strides: cx.usizes("strides")?,
        pads: cx.usizes("pads")?,
        dilations: cx.usizes("dilations")?,
        auto_pad: auto_pad(cx)?,
        ceil_mode: cx.int("ceil_mode", 0)? != 0,
        count_include_pad: cx.int("count_include_pad", 0)? != 0,
    })
}

fn max_pool(cx: &mut Ctx) -> Result<()> {
    cx.only_outputs(1, "MaxPool's Indices")?;
    if cx.int("storage_order", 0)? != 0 {
        return Err(cx.unsupported("storage_order=1 is not supported"));
    }
    let attrs = pool_attrs(cx)?;
    let x = cx.input(0)?;
    cx.emit(Op::MaxPool(attrs), vec![x])
}

fn average_pool(cx: &mut Ctx) -> Result<()> {
    let attrs = pool_attrs(cx)?;
    let x = cx.input(0)?;
    cx.emit(Op::AveragePool(attrs), vec![x])
}

fn lp_pool(cx: &mut Ctx) -> Result<()> {
    let attrs = pool_attrs(cx)?;
    // LpPool's p was a float before opset 2 and an int since.
    let p = cx.int("p", 2)? as f32;
    let x = cx.input(0)?;
    cx.emit(Op::LpPool { attrs, p }, vec![x])
}

fn global_average_pool(cx: &mut Ctx) -> Result<()> {
    let x = cx.input(0)?;
    cx.emit(Op::GlobalAveragePool, vec![x])
}

fn global_max_pool(cx: &mut Ctx) -> Result<()> {
    let x = cx.input(0)?;
    cx.emit(Op::GlobalMaxPool, vec![x])
}

/// Resize (opset 10: `(x, scales)`; 11+: `(x, roi, scales, sizes)`) and its predecessor Upsample.
/// Scales/sizes that are not constants stay an input for the graph to canonicalize.
fn resize(cx: &mut Ctx) -> Result<()> {
    let mode = match cx.string("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        other => return Err(cx.invalid(format!("unknown mode {other:?}"))),
    };
    let upsample = cx.op_type() == "Upsample";
    // Upsample's semantics are Resize with asymmetric coordinates and floor rounding.
    let coord_default = if upsample || cx.opset < 11 { "asymmetric" } else { "half_pixel" };
    let coord = match cx.string("coordinate_transformation_mode", coord_default)?.as_str() {
        "half_pixel" => CoordTransform::HalfPixel,
        "half_pixel_symmetric" => CoordTransform::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordTransform::PytorchHalfPixel,
        "align_corners" => CoordTransform::AlignCorners,
        "asymmetric" => CoordTransform::Asymmetric,
        "tf_crop_and_resize" => CoordTransform::TfCropAndResize,
        other => {
            return Err(cx
                .unsupported(format!("coordinate_transformation_mode {other:?} is not supported")))
        }
    };
    let nearest_default = if upsample || cx.opset < 11 { "floor" } else { "round_prefer_floor" };
    let nearest = match cx.string("nearest_mode", nearest_default)?.as_str() {
        "round_prefer_floor" => NearestRounding::RoundPreferFloor,
        "round_prefer_ceil" => NearestRounding::RoundPreferCeil,
        "floor" => NearestRounding::Floor,
        "ceil" => NearestRounding::Ceil,
        other => return Err(cx.invalid(format!("unknown nearest_mode {other:?}"))),
    };
    let keep_aspect = match cx.string("keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => KeepAspect::Stretch,
        "not_larger" => KeepAspect::NotLarger,
        "not_smaller" => KeepAspect::NotSmaller,
        other => return Err(cx.invalid(format!("unknown keep_aspect_ratio_policy {other:?}"))),
    };
    // tf_crop_and_resize reads its region from input 1 (opset >= 11), which must be constant.
    let roi = if coord == CoordTransform::TfCropAndResize {
        let t = cx.req_const_input(1, "roi")?;
        t.to_f64_vec().into_iter().map(|v| v as f32).collect()
    } else {
        vec![]
    };
    let mut attrs = ResizeAttrs {
        mode,
        coord,
        nearest,
        cubic_coeff_a: cx.float("cubic_coeff_a", -0.75)?,
        exclude_outside: cx.int("exclude_outside", 0)? != 0,
        antialias: cx.int("antialias", 0)? != 0,
        scales: vec![],
        sizes: vec![],
        sizes_input: false,
        axes: cx.ints("axes")?.unwrap_or_default(),
        keep_aspect,
        roi,
        extrapolation_value: cx.float("extrapolation_value", 0.0)?,
    };
    let x = cx.input(0)?;
    if upsample && cx.opset < 9 {
        attrs.scales =
            cx.floats("scales")?.ok_or_else(|| cx.invalid("attribute \"scales\" is required"))?;
        return cx.emit(Op::Resize(attrs), vec![x]);
    }
    let (scales_at, sizes_at) = if upsample || cx.opset < 11 { (1, usize::MAX) } else { (2, 3) };
    let present = |cx: &Ctx, i: usize| -> Result<Option<mpsrt_graph::ValueId>> {
        // An empty constant (opset 11-12 require a scales input even with sizes) means absent.
        match cx.const_input(i)? {
            Some(t) if t.numel() == 0 => Ok(None),
            _ => cx.opt_input(i),
        }
    };
    let (input, sizes) = match (
        present(cx, scales_at)?,
        if sizes_at == usize::MAX { None } else { present(cx, sizes_at)? },
    ) {
        (_, Some(s)) => (s, true),
        (Some(s), None) => (s, false),
        (None, None) => return Err(cx.invalid("needs scales or sizes")),
    };
    attrs.sizes_input = sizes;
    cx.emit(Op::Resize(attrs), vec![x, input])
}
