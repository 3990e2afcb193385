//! Assembles the WGSL module around the traced body: bindings, the uniform block, per-buffer
//! load/store helpers, workgroup scratch, and the entry point that derives program ids.

use crate::emit::Emitter;
use crate::lower::{ArgInfo, Lowerer};
use crate::source::Source;
use crate::{
    Access, ArgSpec, BindingSpec, CompileOptions, CompiledKernel, KernelSignature, UniformField,
    UniformKind,
};
use mpsrt_core::{DType, Error, Result};
use rustpython_parser::ast;
use std::fmt::Write;

pub(crate) const ENTRY: &str = "main";

pub(crate) fn build(
    src: &Source,
    kernel: &ast::StmtFunctionDef,
    sig: &KernelSignature,
    opts: &CompileOptions,
    cache_key: String,
) -> Result<CompiledKernel> {
    // Trace at the largest workgroup size to learn the largest block, then retrace at a size
    // that gives every invocation at least one element of it (code depends on the size).
    let max_wg = opts.max_workgroup_size as usize;
    let mut low = Lowerer::new(src, max_wg);
    low.em.subgroups = opts.subgroups;
    low.em.self_bounded = opts.self_bounded;
    low.run(kernel, sig)?;
    let wg = low.em.max_numel.clamp(1, max_wg).next_power_of_two().min(max_wg);
    if wg != max_wg {
        low = Lowerer::new(src, wg);
        low.em.subgroups = opts.subgroups;
        low.em.self_bounded = opts.self_bounded;
        low.run(kernel, sig)?;
    }
    finish(&low.args, &low.em, kernel.name.as_str(), wg, cache_key, opts)
}

/// Checks the workgroup-memory footprint and assembles the module around a lowered body. Both
/// frontends (Python `@jit` source and Triton's TTIR) end here, so they share one WGSL shape.
pub(crate) fn finish(
    args: &[ArgInfo],
    em: &Emitter,
    name: &str,
    wg: usize,
    cache_key: String,
    opts: &CompileOptions,
) -> Result<CompiledKernel> {
    let bytes = (em.scratch[0] + em.scratch[1]) * 4 + em.extra_workgroup_bytes + em.wgr_words * 4;
    if bytes > opts.max_workgroup_storage as usize {
        return Err(Error::unsupported(
            "jit",
            format!(
                "kernel `{name}` needs {bytes} bytes of workgroup memory for its reductions/broadcasts/tl.dot tiles but the device allows {}; use smaller BLOCK sizes",
                opts.max_workgroup_storage
            ),
        ));
    }
    Ok(assemble(args, em, name, wg, cache_key, opts.prune_dead))
}

fn assemble(
    args: &[ArgInfo],
    em: &Emitter,
    name: &str,
    wg: usize,
    cache_key: String,
    prune: bool,
) -> CompiledKernel {
    let mut fields = vec![
        field("num_programs_0", UniformKind::NumPrograms(0), "np0", "u32"),
        field("num_programs_1", UniformKind::NumPrograms(1), "np1", "u32"),
        field("num_programs_2", UniformKind::NumPrograms(2), "np2", "u32"),
        field("dispatch_x", UniformKind::DispatchX, "disp_x", "u32"),
        field("dispatch_y", UniformKind::DispatchY, "disp_y", "u32"),
    ];
    let mut bindings = Vec::new();
    // WGSL variable of each binding.
    let mut wgsl_names = Vec::new();
    for (k, a) in args.iter().enumerate() {
        if let ArgSpec::Pointer { dtype } = a.spec {
            fields.push(field(
                &format!("{}.offset", a.name),
                UniformKind::ViewOffset { arg: k },
                &format!("off{k}"),
                "i32",
            ));
            bindings.push(BindingSpec {
                binding: bindings.len() as u32,
                arg_index: k,
                name: a.name.clone(),
                dtype,
                access: if a.stored { Access::ReadWrite } else { Access::Read },
                wgsl_elem: if !a.atomics.is_empty() {
                    atomic_elem(dtype)
                } else {
                    storage_elem(dtype, a.stored, em.native_f16_store)
                }
                .to_string(),
            });
            wgsl_names.push(format!("buf{k}"));
            let vec = match (a.half4, a.quad) {
                _ if a.stored || !a.atomics.is_empty() => None,
                (true, _) => Some("vec4<f16>"),
                (false, true) => Some("vec4<u32>"),
                _ => None,
            };
            if let Some(elem) = vec {
                // The same buffer once more, vector-typed, for the staged dot's whole runs
                // (`ArgInfo::quad` / `half4`): a vector binding's `arrayLength` rounds down,
                // so the buffer's last 1-7 halves are reachable only through the word binding.
                bindings.push(BindingSpec {
                    binding: bindings.len() as u32,
                    arg_index: k,
                    name: a.name.clone(),
                    dtype,
                    access: Access::Read,
                    wgsl_elem: elem.to_string(),
                });
                wgsl_names.push(format!("bufv{k}"));
            }
        }
    }
    for (k, a) in args.iter().enumerate() {
        if let ArgSpec::Scalar { dtype } = a.spec {
            let t = match dtype {
                DType::F32 | DType::F16 => "f32",
                DType::Bool => "u32",
                _ => "i32",
            };
            fields.push(field(&a.name, UniformKind::Scalar { arg: k, dtype }, &format!("s{k}"), t));
        }
    }
    for (i, f) in fields.iter_mut().enumerate() {
        f.0.offset = 4 * i as u32;
    }
    let uniform_size = (4 * fields.len() as u32).div_ceil(16) * 16;
    let mut w = String::new();
    if em.uses_coop {
        w.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
    } else if em.uses_f16 {
        w.push_str("enable f16;\n");
    }
    if em.self_bounded {
        w.push_str(crate::SELF_BOUNDED_MARKER);
    }
    let _ = writeln!(w, "// Generated by mpsrt-jit from @jit kernel `{name}`.");
    w.push_str("struct Params {\n");
    for (f, wname) in &fields {
        let _ = writeln!(w, "    {wname}: {},", f.wgsl_type);
    }
    w.push_str("}\n\n");
    for (b, var) in bindings.iter().zip(&wgsl_names) {
        let access = if b.access == Access::ReadWrite { "read_write" } else { "read" };
        let _ = writeln!(
            w,
            "@group(0) @binding({}) var<storage, {access}> {var}: array<{}>;",
            b.binding, b.wgsl_elem
        );
    }
    let _ = writeln!(w, "@group(0) @binding({}) var<uniform> P: Params;\n", bindings.len());
    for (i, &n) in em.scratch.iter().enumerate() {
        if n > 0 {
            let _ = writeln!(w, "var<workgroup> wg{i}: array<u32, {n}>;");
        }
    }
    if em.wgr_words > 0 {
        // Subgroup reductions' partials (and published result), see `subgroup`.
        let _ = writeln!(w, "var<workgroup> wgr: array<u32, {}>;", em.wgr_words);
    }
    if em.lines.iter().any(|l| l.contains("f16r(")) {
        w.push_str(F16_HELPER);
    }
    for (k, a) in args.iter().enumerate() {
        if let ArgSpec::Pointer { dtype } = a.spec {
            if em.self_bounded && (a.loaded || a.stored || !a.atomics.is_empty()) {
                // The last element (of the binding's WGSL type) is the clamp bound.
                for var in wgsl_names.iter().zip(&bindings).filter(|(_, b)| b.arg_index == k) {
                    let v = var.0;
                    let f = v.replace("buf", "ix");
                    let _ = writeln!(
                        w,
                        "fn {f}(i: u32) -> u32 {{\n    return min(i, arrayLength(&{v}) - 1u);\n}}"
                    );
                }
            }
            let native = em.native_f16_store && dtype == DType::F16;
            accessors(&mut w, k, dtype, a, em.self_bounded, native);
        }
    }
    for f in &em.functions {
        w.push('\n');
        w.push_str(f);
    }
    let _ = writeln!(w, "\n@compute @workgroup_size({wg})");
    let sg = match (em.uses_coop || em.uses_subgroups, em.uses_subgroups) {
        (_, true) => ", @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) sgl: u32, @builtin(num_subgroups) nsg: u32, @builtin(subgroup_size) sgs: u32",
        (true, false) => ", @builtin(subgroup_id) sg: u32",
        _ => "",
    };
    let _ = writeln!(w, "fn {ENTRY}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32{sg}) {{");
    w.push_str(PROLOGUE);
    if em.uses_parity {
        // The half of `wgr` the next one-barrier reduction writes (`subgroup`).
        w.push_str("    var rp: u32 = 0u;\n");
    }
    for b in &bindings {
        if !(args[b.arg_index].loaded || args[b.arg_index].stored) {
            // Keeps unused buffers in the pipeline's derived layout, so the launcher can always
            // bind one buffer per pointer argument.
            let _ = writeln!(w, "    _ = arrayLength(&buf{});", b.arg_index);
        }
    }
    let mut lines = em.lines.clone();
    if prune {
        crate::prune::prune_dead_arrays(&mut lines, &em.functions);
    }
    for l in &lines {
        w.push_str(l);
        w.push('\n');
    }
    w.push_str("}\n");
    CompiledKernel {
        name: name.to_string(),
        wgsl: w,
        entry_point: ENTRY.to_string(),
        workgroup_size: wg as u32,
        uniform_binding: bindings.len() as u32,
        bindings,
        uniform_layout: fields.into_iter().map(|(f, _)| f).collect(),
        uniform_size,
        workgroup_bytes: ((em.scratch[0] + em.scratch[1]) * 4
            + em.extra_workgroup_bytes
            + em.wgr_words * 4) as u32,
        cache_key,
    }
}

fn field(name: &str, kind: UniformKind, wname: &str, t: &'static str) -> (UniformField, String) {
    (UniformField { name: name.to_string(), offset: 0, kind, wgsl_type: t }, wname.to_string())
}

/// Storage of a buffer that atomics touch (`ttir::atomic`): i32 as `atomic<i32>`, f32 bits as
/// `atomic<u32>`.
fn atomic_elem(d: DType) -> &'static str {
    if d == DType::I32 {
        "atomic<i32>"
    } else {
        "atomic<u32>"
    }
}

fn storage_elem(d: DType, stored: bool, native_f16: bool) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I32 => "i32",
        DType::F16 if stored && native_f16 => "f16",
        // Packed types: stores use atomics so lanes of one word written by different
        // invocations do not race (see the crate docs).
        _ if stored => "atomic<u32>",
        _ => "u32",
    }
}

/// Emits `ld{k}` / `st{k}` for pointer parameter `k` (only those the kernel uses).
fn accessors(w: &mut String, k: usize, d: DType, a: &ArgInfo, bounded: bool, native: bool) {
    let rt = crate::value::Ty::D(d).wgsl();
    // Index `i` of the binding, clamped with `bounded`.
    let ix = |i: &str| bix(k, i, bounded);
    if native && a.stored && a.atomics.is_empty() {
        // An `array<f16>` binding (`Emitter::native_f16_store`): plain element accesses.
        let _ = writeln!(
            w,
            "fn ld{k}(p: i32) -> f32 {{\n    return f32(buf{k}[{}]);\n}}\nfn st{k}(p: i32, v: f32) {{\n    buf{k}[{}] = f16(v);\n}}",
            ix("u32(p + P.off{k})").replace("{k}", &k.to_string()),
            ix("u32(p + P.off{k})").replace("{k}", &k.to_string())
        );
        return;
    }
    if !a.atomics.is_empty() {
        // Every access of an atomic buffer is atomic (WGSL has no plain access to atomic<T>).
        let (load, store) = if d == DType::I32 {
            (format!("atomicLoad(&buf{k}[{}])", ix("j")), "v".to_string())
        } else {
            (
                format!("bitcast<f32>(atomicLoad(&buf{k}[{}]))", ix("j")),
                "bitcast<u32>(v)".to_string(),
            )
        };
        let _ = writeln!(
            w,
            "fn ld{k}(p: i32) -> {rt} {{\n    let j = u32(p + P.off{k});\n    return {load};\n}}\nfn st{k}(p: i32, v: {rt}) {{\n    let j = u32(p + P.off{k});\n    atomicStore(&buf{k}[{}], {store});\n}}",
            ix("j")
        );
        for (kind, elem) in &a.atomics {
            crate::ttir::atomic_helper(w, k, d, kind, *elem, bounded);
        }
        return;
    }
    let word = |shift: &str| {
        if a.stored {
            format!("atomicLoad(&buf{k}[{}])", ix(&format!("j >> {shift}")))
        } else {
            format!("buf{k}[{}]", ix(&format!("j >> {shift}")))
        }
    };
    if a.loaded && !a.stored && d == DType::F16 {
        // Word `j` (the staged tl.dot reads whole words, `ttir::dot_stage`).
        let _ = writeln!(w, "fn wd{k}(j: u32) -> u32 {{\n    return buf{k}[{}];\n}}", ix("j"));
    }
    if a.loaded {
        let body = match d {
            DType::F32 | DType::I32 => format!("return buf{k}[{}];", ix("j")),
            DType::F16 => format!("return unpack2x16float({})[j & 1u];", word("1u")),
            DType::U8 => format!("return i32(({} >> ((j & 3u) * 8u)) & 255u);", word("2u")),
            DType::I8 => format!("return i32({} << (24u - (j & 3u) * 8u)) >> 24u;", word("2u")),
            _ => format!("return (({} >> ((j & 3u) * 8u)) & 255u) != 0u;", word("2u")),
        };
        let _ = writeln!(
            w,
            "fn ld{k}(p: i32) -> {rt} {{\n    let j = u32(p + P.off{k});\n    {body}\n}}"
        );
    }
    if a.stored {
        let body = match d {
            DType::F32 | DType::I32 => format!("buf{k}[{}] = v;", ix("j")),
            DType::F16 => format!(
                "let sh = (j & 1u) * 16u;\n    let h = pack2x16float(vec2<f32>(v, 0.0f)) & 0xffffu;\n    atomicAnd(&buf{k}[{w}], ~(0xffffu << sh));\n    atomicOr(&buf{k}[{w}], h << sh);",
                w = ix("j >> 1u")
            ),
            _ => {
                let b = if d == DType::Bool { "select(0u, 1u, v)" } else { "u32(v) & 255u" };
                format!(
                    "let sh = (j & 3u) * 8u;\n    let b = {b};\n    atomicAnd(&buf{k}[{w}], ~(255u << sh));\n    atomicOr(&buf{k}[{w}], b << sh);",
                    w = ix("j >> 2u")
                )
            }
        };
        let _ = writeln!(
            w,
            "fn st{k}(p: i32, v: {rt}) {{\n    let j = u32(p + P.off{k});\n    {body}\n}}"
        );
    }
}

/// Index `i` of buffer `k`'s binding, through its clamp `ix{k}` when `bounded`
/// (`CompileOptions::self_bounded`).
pub(crate) fn bix(k: usize, i: &str, bounded: bool) -> String {
    if bounded {
        format!("ix{k}({i})")
    } else {
        i.to_string()
    }
}

/// [`bix`] for buffer `k`'s vector-typed binding `bufv{k}` (`ArgInfo::quad` / `half4`).
pub(crate) fn bixv(k: usize, i: &str, bounded: bool) -> String {
    if bounded {
        format!("ixv{k}({i})")
    } else {
        i.to_string()
    }
}

/// Rounds an f32 to the nearest f16 value (f16 values live in f32 registers).
const F16_HELPER: &str = "\nfn f16r(x: f32) -> f32 {\n    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0f))).x;\n}\n";

/// Linearizes the workgroup id (2-D fallback for large grids) and derives the program ids.
const PROLOGUE: &str = "    let lin = wid.x + P.disp_x * (wid.y + P.disp_y * wid.z);
    if (lin >= P.np0 * P.np1 * P.np2) {
        return;
    }
    let pid0 = i32(lin % P.np0);
    let pid1 = i32((lin / P.np0) % P.np1);
    let pid2 = i32(lin / (P.np0 * P.np1));
";
