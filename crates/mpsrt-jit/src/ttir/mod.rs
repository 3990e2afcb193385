//! The second frontend: Triton's own IR. A real `triton` installation (its `@triton.jit`
//! frontend and TTIR passes, driven by the `mpsrt.triton_backend` plug-in) hands the TTIR of a
//! specialized kernel over as MLIR text; [`compile_ttir`] parses it ([`parse`]) and lowers its
//! ops ([`lower`]) onto the same emitter, values and module assembly that the Python `@jit`
//! frontend uses, so both produce WGSL with one launch contract (see the crate docs).
//!
//! Constexprs are already folded into the TTIR and absent from the function's parameters, so
//! the signature comes from the TTIR itself: `!tt.ptr<T>` parameters are storage buffers, `i32`
//! / `i64` / `f32` / `f16` / `i1` parameters are runtime scalars in the uniform block (in
//! parameter order, the indices in [`crate::UniformKind`] are TTIR parameter indices).
//! Unsupported ops are errors naming the op and the kernel's source line (from `loc(...)`).

mod atomic;
mod bounds;
mod control;
mod coop_acc;
mod dot_stage;
mod elementwise;
mod lower;
pub(crate) mod parse;
mod pipeline;
mod reduce;
mod remat;
mod stage_emit;
mod uniform;

use crate::{ArgSpec, CompileOptions, CompiledKernel, KernelSignature};
pub(crate) use atomic::helper as atomic_helper;
use mpsrt_core::{DType, Error, Result};

/// Elements per invocation the workgroup widens to. `mpsrt.jit`'s tutorial vector add ran at the
/// built-in's bandwidth on the H100 with 256 invocations x 4 elements per 1024-element block; the
/// same kernel through Triton (num_warps = 4: 128 x 8) read 57% (BENCHMARKS.md, 2026-11-25), so
/// widening also aims for at least [`MIN_WIDE`] invocations (at 4 elements each or more). Beyond
/// that, shares of up to 16 stay unrolled in registers: tutorial 02 at 4096 columns (num_warps 8)
/// runs 256 x 16 rather than 1024 x 4, whose 32-subgroup barriers and 2 workgroups per SM held it
/// at 63% of the built-in softmax (256 x 16 as well) on an H200 (session 11).
pub const WIDEN_TO: usize = 16;

/// Invocations widening aims for at least, where the largest block has 4 elements for each.
pub const MIN_WIDE: usize = 256;

/// Compiles the TTIR text of one kernel (`kernel_name`, default: the public `tt.func`) to WGSL.
pub fn compile_ttir(
    ttir: &str,
    kernel_name: Option<&str>,
    opts: &CompileOptions,
) -> Result<CompiledKernel> {
    compile_ttir_widening(ttir, kernel_name, opts, opts.max_workgroup_size)
}

/// [`compile_ttir`], letting the workgroup grow past `opts.max_workgroup_size` (Triton's
/// `num_warps * 32`, a hint here) up to `device_max` (a power of two) until no invocation holds
/// more than [`WIDEN_TO`] elements of the largest block: those loops are unrolled, which keeps
/// the per-invocation arrays in registers (runtime-indexed ones spill on NVIDIA).
pub fn compile_ttir_widening(
    ttir: &str,
    kernel_name: Option<&str>,
    opts: &CompileOptions,
    device_max: u32,
) -> Result<CompiledKernel> {
    compile_ttir_widening_to(ttir, kernel_name, opts, device_max, WIDEN_TO)
}

/// [`compile_ttir_widening`] with `per_invocation` elements per invocation as the widening
/// target instead of [`WIDEN_TO`] (shares of up to 8 elements stay unrolled;
/// the Python extension reads `MPSRT_TRITON_WIDEN_TO` to A/B it on a GPU).
pub fn compile_ttir_widening_to(
    ttir: &str,
    kernel_name: Option<&str>,
    opts: &CompileOptions,
    device_max: u32,
    per_invocation: usize,
) -> Result<CompiledKernel> {
    if per_invocation == 0 {
        return Err(Error::invalid("triton", "per_invocation must be positive"));
    }
    if !device_max.is_power_of_two() {
        return Err(Error::invalid("triton", "device_max must be a power of two"));
    }
    if !opts.max_workgroup_size.is_power_of_two() {
        return Err(Error::invalid("triton", "max_workgroup_size must be a power of two"));
    }
    let funcs = parse::parse_module(ttir)?;
    let func = match kernel_name {
        Some(n) => funcs.iter().find(|f| f.name == n),
        None => funcs.iter().find(|f| f.public).or(funcs.first()),
    }
    .ok_or_else(|| {
        Error::invalid(
            "triton",
            format!(
                "no tt.func {} in the TTIR",
                kernel_name.map_or("".into(), |n| format!("@{n}"))
            ),
        )
    })?;
    if let Some(call) = first_call(&func.body) {
        return Err(Error::unsupported(
            "triton",
            format!(
                "{}: tt.call of `{call}` (a noinline function) is not supported; let the inliner inline it",
                func.loc.as_ref().map_or("kernel".into(), |l| l.to_string())
            ),
        ));
    }
    let sig = signature(func)?;
    let key = crate::cache_key(ttir, &func.name, &sig, opts);
    let mut max_wg = opts.max_workgroup_size as usize;
    // Reduction results may stay non-uniform WGSL values unless one steers control flow.
    let free = !uniform::reductions_steer(&func.body);
    let lower_at = |wg: usize| -> Result<lower::TtirLowerer> {
        let mut l = lower::TtirLowerer::new(wg, opts);
        l.em.nonuniform_ok = free;
        (l.em.subgroup_size, l.em.one_barrier) = (opts.subgroup_size as usize, opts.one_barrier);
        l.run(func, &sig)?;
        Ok(l)
    };
    let mut low = lower_at(max_wg)?;
    let numel = low.em.max_numel;
    let wide =
        numel.div_ceil(per_invocation).max(MIN_WIDE.min(numel.div_ceil(4))).next_power_of_two();
    // Kernels whose `tl.dot` runs on cooperative matrices keep Triton's num_warps: the staged
    // dot (`dot_stage`) deals its tiles over exactly those subgroups.
    let staged_dot = opts.stage_dot && opts.coop.is_some() && ttir.contains("tt.dot");
    if !staged_dot && wide > max_wg && (device_max as usize) > max_wg {
        max_wg = wide.min(device_max as usize);
        low = lower_at(max_wg)?;
    }
    let mut wg = low.em.max_numel.clamp(1, max_wg).next_power_of_two().min(max_wg);
    if let Some(w) = narrowed(ttir, opts, free, low.em.max_numel).filter(|&w| w < wg) {
        wg = w;
    }
    if wg != max_wg {
        low = lower_at(wg)?;
    }
    // A cooperative `tl.dot` deals its output tiles evenly over the subgroups; when widening
    // left more subgroups than tiles (tutorial 03's 32x32 blocks at 256 invocations: 4 tiles,
    // 8 subgroups) the dot fell back to the register path. Narrow the workgroup until the
    // matrix units take it (the blocks' per-invocation share grows, but the dot dominates).
    if let Some(c) = opts.coop {
        if !low.em.uses_coop && ttir.contains("tt.dot") {
            let mut w = wg / 2;
            while w >= (c.subgroup as usize).max(1) {
                let l = lower_at(w)?;
                if l.em.uses_coop {
                    (low, wg) = (l, w);
                    break;
                }
                w /= 2;
            }
        }
    }
    crate::module::finish(&low.args, &low.em, &func.name, wg, key, opts)
}

/// The workgroup `CompileOptions::narrow_to` picks for a kernel whose largest block has `numel`
/// elements: one subgroup, where that holds the block at `narrow_to` elements per invocation or
/// fewer (every whole-block reduction is then a subgroup operation, no barrier); `None` where
/// the layout choice does not apply (larger blocks, no reduction, a `tl.dot` or scan, a
/// reduction steering control flow, no fixed subgroup size). Narrowing a larger block to
/// fewer subgroups only halves the parallelism: tutorial 02 at 1024 columns on an H100 ran
/// 12.1 µs at 128 invocations, 11.6 / 12.6 at 256 (session 15, call 1).
fn narrowed(ttir: &str, opts: &CompileOptions, free: bool, numel: usize) -> Option<usize> {
    let (n, sg) = (opts.narrow_to as usize, opts.subgroup_size as usize);
    let reduces =
        ttir.contains("tt.reduce") && !ttir.contains("tt.dot") && !ttir.contains("tt.scan");
    if n == 0 || sg == 0 || !opts.subgroups || !free || !reduces || numel > n * sg {
        return None;
    }
    Some(sg)
}

/// The launch signature of a TTIR function: one entry per parameter.
fn signature(f: &parse::Func) -> Result<KernelSignature> {
    let mut args = Vec::new();
    for (name, ty) in &f.params {
        let t = parse::parse_type(ty).map_err(|_| {
            Error::unsupported(
                "triton",
                format!("parameter {name} of @{} has type `{ty}`, which is not supported", f.name),
            )
        })?;
        if !t.shape.is_empty() {
            return Err(Error::unsupported("triton", format!("tensor parameter {name} ({ty})")));
        }
        args.push(match t.elem {
            parse::Elem::Ptr(dtype) => {
                if !dtype.gpu_supported() {
                    return Err(Error::unsupported(
                        "triton",
                        format!("pointer parameter {name} of {dtype} is not supported on the GPU"),
                    ));
                }
                ArgSpec::Pointer { dtype }
            }
            parse::Elem::D(d) => ArgSpec::Scalar {
                dtype: match d {
                    DType::F32 | DType::F64 => DType::F32,
                    DType::F16 => DType::F16,
                    DType::Bool => DType::Bool,
                    _ => DType::I32,
                },
            },
        });
    }
    Ok(KernelSignature { args })
}

fn first_call(ops: &[parse::Op]) -> Option<String> {
    for op in ops {
        if op.name == "tt.call" {
            return Some(
                op.body.split(['(', ' ']).next().unwrap_or("").trim_start_matches('@').into(),
            );
        }
        for r in &op.regions {
            if let Some(c) = first_call(&r.ops) {
                return Some(c);
            }
        }
    }
    None
}
