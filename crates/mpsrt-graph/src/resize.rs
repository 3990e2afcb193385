//! The per-axis geometry of `Resize` (output length and the scale the coordinate transform
//! uses), shared by shape inference and the executor so both agree by construction. Follows
//! ONNX's reference: `axes` select the resized axes, `keep_aspect_ratio_policy` turns `sizes`
//! into one common scale, `roi` belongs to `tf_crop_and_resize`.

use crate::op::{KeepAspect, ResizeAttrs};
use mpsrt_core::{normalize_axis, Error, Result};

/// One axis of a resize: output length, coordinate scale and the crop region (`0..1` without
/// `tf_crop_and_resize`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResizeAxis {
    pub out: usize,
    pub scale: f64,
    pub roi: (f64, f64),
}

impl ResizeAttrs {
    /// The resize of every axis of an input shaped `input`.
    pub fn plan(&self, input: &[usize]) -> Result<Vec<ResizeAxis>> {
        let op = "Resize";
        let rank = input.len();
        let axes: Vec<usize> = if self.axes.is_empty() {
            (0..rank).collect()
        } else {
            self.axes
                .iter()
                .map(|&a| normalize_axis(op, a as isize, rank))
                .collect::<Result<_>>()?
        };
        let given = if self.sizes.is_empty() { self.scales.len() } else { self.sizes.len() };
        if given != axes.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "{} has {given} entries for {} axes of input {input:?}",
                    if self.sizes.is_empty() { "scales" } else { "sizes" },
                    axes.len()
                ),
            ));
        }
        let mut plan: Vec<ResizeAxis> =
            input.iter().map(|&n| ResizeAxis { out: n, scale: 1.0, roi: (0.0, 1.0) }).collect();
        if !self.roi.is_empty() {
            if self.roi.len() != 2 * axes.len() {
                return Err(Error::invalid(
                    op,
                    format!("roi has {} values, expected {}", self.roi.len(), 2 * axes.len()),
                ));
            }
            for (k, &a) in axes.iter().enumerate() {
                plan[a].roi = (self.roi[k] as f64, self.roi[axes.len() + k] as f64);
            }
        }
        if self.sizes.is_empty() {
            for (k, &a) in axes.iter().enumerate() {
                let s = self.scales[k] as f64;
                if !(s.is_finite() && s > 0.0) {
                    return Err(Error::invalid(op, format!("scale {s} must be positive")));
                }
                plan[a].scale = s;
                plan[a].out = (input[a] as f64 * s).floor() as usize;
            }
            return Ok(plan);
        }
        let ratio = |k: usize, a: usize| self.sizes[k] as f64 / input[a].max(1) as f64;
        let common = match self.keep_aspect {
            KeepAspect::Stretch => None,
            KeepAspect::NotLarger => Some(
                axes.iter().enumerate().map(|(k, &a)| ratio(k, a)).fold(f64::INFINITY, f64::min),
            ),
            KeepAspect::NotSmaller => {
                Some(axes.iter().enumerate().map(|(k, &a)| ratio(k, a)).fold(0.0, f64::max))
            }
        };
        for (k, &a) in axes.iter().enumerate() {
            match common {
                None => {
                    plan[a].out = self.sizes[k];
                    plan[a].scale = ratio(k, a);
                }
                Some(s) => {
                    plan[a].scale = s;
                    plan[a].out = (s * input[a] as f64).round_ties_even() as usize;
                }
            }
        }
        Ok(plan)
    }
}
