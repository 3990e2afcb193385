//! `mpsrt-jit`: compiles kernels written in the Triton language (Python `@jit` functions) to WGSL.
//!
//! The compiler is text in, text out: [`compile`] parses the module source, specializes the
//! kernel for a [`KernelSignature`] (pointer element types, scalar types, constexpr values),
//! lowers the block-level program to WGSL and returns a [`CompiledKernel`] that a generic
//! "dispatch this WGSL with these storage buffers, this uniform block and this many workgroups"
//! runtime call can launch. It has no wgpu dependency, so everything is snapshot-testable.
//!
//! # Execution model
//! One Triton *program* is one workgroup of [`CompiledKernel::workgroup_size`] invocations.
//! A block value of `numel` elements (row-major) is distributed so that invocation `lid`
//! owns elements `e = i * workgroup_size + lid` for `i in 0..ceil(numel / workgroup_size)`,
//! held in private arrays. Broadcasts that change the distribution, reductions and `tl.dot`
//! exchange data through `var<workgroup>` memory between `workgroupBarrier()`s.
//!
//! # Launch contract
//! * Bind group 0: bindings `0..n` are the pointer arguments in parameter order
//!   ([`CompiledKernel::bindings`]), each a storage buffer (read-only unless the kernel stores
//!   through it). f32 / i32 tensors are `array<f32>` / `array<i32>`; f16 tensors are packed two
//!   per `u32` word (element `k` is the low half of word `k / 2` when `k` is even); u8 / i8 /
//!   bool tensors are packed four per word, little-endian. Packed buffers that are stored to
//!   are declared `array<atomic<u32>>`: a store clears its lane with `atomicAnd` and sets it
//!   with `atomicOr`, so invocations writing neighbouring elements of one word never race.
//!   Buffers must be at least 4 bytes and a whole number of words (pad packed tensors).
//!   Exception: the f16 operand buffers of a staged `tl.dot` (TTIR, [`CompileOptions::stage_dot`])
//!   may be declared `array<vec4<u32>>` ([`BindingSpec::wgsl_elem`]) for 16-byte loads: bind
//!   them whole (at least 16 bytes, a multiple of 16), as the Triton launcher does.
//! * Binding `n` is a uniform buffer laid out as [`CompiledKernel::uniform_layout`]: every field
//!   is 4 bytes, at the offset it lists, little-endian; the buffer is
//!   [`CompiledKernel::uniform_size`] bytes (a multiple of 16, zero padding). Fields, in order:
//!   `num_programs[0..3]` (u32: the grid, 1 for missing axes), `dispatch_x`, `dispatch_y` (u32: the
//!   workgroup counts the launcher dispatched along x and y), one `offset` per pointer argument
//!   (i32: the element offset of the view inside its buffer), then one field per runtime scalar
//!   argument in parameter order (i32 for integers, f32 for f32/f16 scalars, u32 0/1 for bool).
//! * Workgroups: let `total = g0 * g1 * g2`. The usual dispatch is `(g0, g1, g2)` with
//!   `dispatch_x = g0`, `dispatch_y = g1`. When an axis exceeds the device limit (65535), dispatch
//!   `(X, Y, 1)` with `Y = ceil(total / 65535)`, `X = ceil(total / Y)` and set `dispatch_x = X`,
//!   `dispatch_y = Y`. The kernel linearizes `lin = wid.x + dispatch_x * (wid.y + dispatch_y * wid.z)`,
//!   skips workgroups with `lin >= total`, and derives `program_id(0) = lin % g0`,
//!   `program_id(1) = (lin / g0) % g1`, `program_id(2) = lin / (g0 * g1)`.

mod builtins;
mod coop;
mod emit;
mod expr;
mod lower;
mod memory;
mod module;
mod prune;
mod source;
mod subgroup;
mod ttir;
mod value;

pub use coop::CoopConfig;
pub use ttir::{compile_ttir, compile_ttir_widening, compile_ttir_widening_to, MIN_WIDE, WIDEN_TO};

use mpsrt_core::{DType, Error, Result};

/// A constexpr argument's value, as Python would pass it.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    None,
}

/// How one kernel parameter is passed.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgSpec {
    /// A tensor: a storage buffer of `dtype` elements (plus a view offset in the uniform block).
    Pointer { dtype: DType },
    /// A runtime scalar, passed in the uniform block (i32, f32, f16 or bool).
    Scalar { dtype: DType },
    /// A compile-time value; the kernel is specialized on it.
    Constexpr { value: ConstValue },
}

/// The argument kinds of one launch, one per kernel parameter, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KernelSignature {
    pub args: Vec<ArgSpec>,
}

/// What the target device offers.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// Subgroup operations are available: whole-block reductions of f32/i32 values reduce within
    /// subgroups first (two barriers instead of a `log2(workgroup)` tree). Set it only where the
    /// adapter has wgpu's `SUBGROUP` feature; the workgroup-memory tree is the fallback.
    pub subgroups: bool,
    /// Largest workgroup size to use (a power of two, at most the device's
    /// `maxComputeInvocationsPerWorkgroup`). A launcher honouring Triton's `num_warps` hint passes
    /// `num_warps * 32`. The kernel uses `min(this, largest block's element count)`.
    pub max_workgroup_size: u32,
    /// Largest `var<workgroup>` footprint in bytes (`maxComputeWorkgroupStorageSize`).
    pub max_workgroup_storage: u32,
    /// The device has `shader-f16`. Reserved: f16 values are computed in f32 and rounded to f16
    /// after every operation, which gives f16 results without requiring the extension.
    pub f16: bool,
    /// A cooperative-matrix configuration (f16 inputs, f32 accumulation) for `tl.dot` on the
    /// matrix units; `None` keeps the register-tiled path. Only set it for adapters that have
    /// the configuration and a fixed subgroup size (see `mpsrt_kernels::plan_coop_matmul`).
    pub coop: Option<CoopConfig>,
    /// TTIR kernels whose `tl.dot` runs on cooperative matrices stage its operands straight from
    /// global memory into padded workgroup slabs, in words, and block each subgroup's tiles in
    /// two dimensions (`ttir::dot_stage`); off: the register-staged path of session 11.
    pub stage_dot: bool,
    /// The staged dot's slabs hold `vec2<f16>` pairs (one 4-byte store per staged pair) rather
    /// than `f16` (two 2-byte stores); for A/B on drivers whose cooperative loads accept
    /// vector-typed pointers.
    pub slab_vec2: bool,
    /// The staged dot's slabs hold `vec4<f16>` (16x16 cooperative tiles only; wins over
    /// `slab_vec2`): full blocks staged in runs of 8 halves store two vectors per 16-byte global
    /// load (`bitcast` of its words, no f32 round trip), and fragments load through vector
    /// pointers with the stride in vectors — the built-in GEMM's `vs4` slabs.
    pub slab_vec4: bool,
    /// Every storage-buffer access of the kernel clamps its index into the buffer
    /// (`min(i, arrayLength(&buf) - 1)`, a helper `ix{k}` per buffer), so reads and writes
    /// through pointers a wrong mask left unguarded stay inside their binding. Workgroup and
    /// register arrays are indexed only by construction (element ids below the block size), so
    /// such a module may be built without wgpu's runtime checks; its WGSL then carries
    /// [`SELF_BOUNDED_MARKER`] (after the `enable`s), which the Python extension looks for before
    /// doing so.
    pub self_bounded: bool,
    /// Per-invocation arrays that are written and never read (blocks later read through their
    /// index templates) are removed from the module with their writes (`prune`), instead of
    /// being left to the driver's compiler.
    pub prune_dead: bool,
    /// With `subgroups`, the staged dot's per-invocation "every run contiguous and aligned"
    /// flag is ANDed over the subgroup (`subgroupAll`) before the K loop, so the per-step branch
    /// between the whole-run copy and the per-pair path is subgroup-uniform for the driver
    /// (a subgroup with one irregular lane takes the general path, which is always correct).
    pub uniform_fast: bool,
    /// The staged dot's operand copies are emitted at the dot, all global loads before any
    /// slab store, under one branch on the operands' joint whole-run condition
    /// (`ttir::stage_emit`); off: each copy where its load stands, one branch per operand.
    pub joint_stage: bool,
    /// With `joint_stage` and `self_bounded`: the staged dot's whole runs of the next K step are
    /// loaded into registers right after the slabs are filled (before the products; the load
    /// is speculative, its index clamped), and stored at the top of the next step when its
    /// whole-run condition holds; before the loop, the first step's runs are loaded. Tutorial 03
    /// at 4096³ on an H200 (session 14): 1.04 ms with it, 1.44 without (session 13: 1.75).
    pub prefetch_stage: bool,
    /// TTIR kernels on an adapter with f16 matrix units (`coop` set, so `shader-f16` too):
    /// buffers f16 blocks are stored to are bound as `array<f16>` and stored element by element
    /// (no packed-word atomics, no pair exchange); the module enables `f16`. Tutorial 03 at
    /// 4096³, 8 warps, on an H100 (session 14 call 2): 0.90 ms with it, 1.01 without.
    pub f16_store: bool,
    /// Testing: with `coop` set, the staged dot (`stage_dot`) keeps its staging (slabs, word
    /// loads, hoisting) but multiplies in f32 registers instead of on cooperative matrices, and
    /// no other path touches them, so adapters without matrix units (lavapipe: `shader-f16` is
    /// enough) run the staging code; `MPSRT_TRITON_EMULATE_COOP=1` in the Python extension.
    pub emulate_coop: bool,
    /// The adapter's subgroup size where it is fixed (`subgroup_min_size ==
    /// subgroup_max_size`), else 0. With `subgroups`, a workgroup no larger than this is one
    /// subgroup: its whole-block reductions are single subgroup operations (`subgroup`).
    pub subgroup_size: u32,
    /// With `subgroups`: TTIR kernels in which no reduction result steers control flow
    /// (`ttir::uniform`) reduce over several subgroups with one barrier instead of two (partials
    /// in alternating halves of the workgroup array, `subgroup`).
    pub one_barrier: bool,
    /// Layout choice for TTIR kernels whose work is reductions of small blocks (a `tt.reduce`,
    /// no `tl.dot` / `tt.scan`, no reduction steering control flow): with `subgroups` and a
    /// known `subgroup_size`, a kernel whose largest block fits one subgroup at `narrow_to`
    /// elements per invocation runs on one subgroup (Triton's `num_warps` is a hint). A
    /// 256-element softmax row on 32-lane subgroups: 8 elements per lane, every reduction a
    /// subgroup operation, no barrier. 0: off.
    pub narrow_to: u32,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            subgroups: false,
            max_workgroup_size: 256,
            max_workgroup_storage: 16384,
            f16: false,
            coop: None,
            stage_dot: true,
            slab_vec2: false,
            slab_vec4: false,
            self_bounded: false,
            prune_dead: true,
            uniform_fast: true,
            joint_stage: true,
            prefetch_stage: true,
            f16_store: true,
            emulate_coop: false,
            subgroup_size: 0,
            one_barrier: true,
            narrow_to: 8,
        }
    }
}

/// Read-only or read-write storage binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// One storage-buffer binding (group 0).
#[derive(Debug, Clone, PartialEq)]
pub struct BindingSpec {
    pub binding: u32,
    /// Index of the kernel parameter this buffer is passed for.
    pub arg_index: usize,
    pub name: String,
    /// Element type of the tensor.
    pub dtype: DType,
    pub access: Access,
    /// WGSL element type of the buffer: `f32`, `i32`, `u32` (packed) or `atomic<u32>` (packed, stored to).
    pub wgsl_elem: String,
}

/// What a uniform field holds.
#[derive(Debug, Clone, PartialEq)]
pub enum UniformKind {
    /// `num_programs(axis)` (u32).
    NumPrograms(u32),
    /// Workgroups dispatched along x (u32).
    DispatchX,
    /// Workgroups dispatched along y (u32).
    DispatchY,
    /// Element offset of pointer parameter `arg` inside its buffer (i32).
    ViewOffset { arg: usize },
    /// Runtime scalar parameter `arg` of `dtype`: i32 for int types, f32 for f32/f16, u32 0/1 for bool.
    Scalar { arg: usize, dtype: DType },
}

/// One 4-byte field of the uniform block.
#[derive(Debug, Clone, PartialEq)]
pub struct UniformField {
    pub name: String,
    pub offset: u32,
    pub kind: UniformKind,
    /// `u32`, `i32` or `f32`.
    pub wgsl_type: &'static str,
}

/// A kernel specialized for one signature, ready to launch (see the crate docs).
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledKernel {
    /// The kernel's name (the Python function / TTIR `tt.func`).
    pub name: String,
    pub wgsl: String,
    pub entry_point: String,
    pub workgroup_size: u32,
    pub bindings: Vec<BindingSpec>,
    /// Binding index of the uniform buffer (= number of pointer arguments).
    pub uniform_binding: u32,
    pub uniform_layout: Vec<UniformField>,
    /// Byte size of the uniform buffer (multiple of 16).
    pub uniform_size: u32,
    /// Bytes of `var<workgroup>` memory the kernel uses (reductions, re-layouts, `tl.dot` tiles).
    pub workgroup_bytes: u32,
    /// Stable key of (compiler version, source, kernel, signature, options): equal keys, equal WGSL.
    pub cache_key: String,
}

/// The comment line (after the `enable` directives) of a module compiled with [`CompileOptions::self_bounded`].
pub const SELF_BOUNDED_MARKER: &str = "// mpsrt-jit: self-bounded (every storage index clamped)\n";

/// The WGSL entry point of every compiled kernel.
pub const ENTRY_POINT: &str = module::ENTRY;

/// Identifies this build of the compiler (an FNV-1a hash of the crate version and the sources
/// that decide the WGSL), for caches outside this crate such as Triton's on-disk cache.
pub fn ttir_compiler_id() -> String {
    let sources = [
        env!("CARGO_PKG_VERSION"),
        include_str!("emit.rs"),
        include_str!("coop.rs"),
        include_str!("memory.rs"),
        include_str!("module.rs"),
        include_str!("lib.rs"),
        include_str!("prune.rs"),
        include_str!("subgroup.rs"),
        include_str!("value.rs"),
        include_str!("ttir/mod.rs"),
        include_str!("ttir/parse.rs"),
        include_str!("ttir/lower.rs"),
        include_str!("ttir/control.rs"),
        include_str!("ttir/elementwise.rs"),
        include_str!("ttir/bounds.rs"),
        include_str!("ttir/reduce.rs"),
        include_str!("ttir/atomic.rs"),
        include_str!("ttir/coop_acc.rs"),
        include_str!("ttir/remat.rs"),
        include_str!("ttir/dot_stage.rs"),
        include_str!("ttir/stage_emit.rs"),
        include_str!("ttir/pipeline.rs"),
        include_str!("ttir/uniform.rs"),
    ];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sources.iter().flat_map(|s| s.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}-{h:016x}", env!("CARGO_PKG_VERSION"))
}

/// Compiles the `@jit` function `kernel_name` (default: the first `@jit` function in `source`
/// that no other `@jit` function calls and whose parameter count matches `sig`)
/// for `sig`. Unsupported constructs are errors that carry the Python line and column.
pub fn compile(
    source: &str,
    kernel_name: Option<&str>,
    sig: &KernelSignature,
    opts: &CompileOptions,
) -> Result<CompiledKernel> {
    if !opts.max_workgroup_size.is_power_of_two() {
        return Err(Error::invalid("jit", "max_workgroup_size must be a power of two"));
    }
    let src = source::Source::parse(source)?;
    let (kernel, _) = src.find_kernel(kernel_name, sig.args.len())?;
    let key = cache_key(source, kernel.name.as_str(), sig, opts);
    module::build(&src, kernel, sig, opts, key)
}

fn cache_key(source: &str, name: &str, sig: &KernelSignature, opts: &CompileOptions) -> String {
    // FNV-1a over a canonical description: stable across processes (unlike `DefaultHasher`),
    // so it can key an on-disk cache too.
    let text =
        format!("{}\0{source}\0{name}\0{:?}\0{:?}", env!("CARGO_PKG_VERSION"), sig.args, opts);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{name}-{h:016x}")
}

#[cfg(test)]
mod tests {
    /// Every TTIR lowering file decides the WGSL, so each must be part of `ttir_compiler_id`
    /// (a file left out would let Triton's disk cache serve kernels from an older compiler).
    #[test]
    fn compiler_id_hashes_every_ttir_source() {
        let lib = include_str!("lib.rs");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ttir");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("src/ttir is readable")
            .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rs"))
            .collect();
        names.sort();
        assert!(names.len() > 10, "found only {names:?}");
        for n in &names {
            let entry = format!("include_str!(\"ttir/{n}\")");
            assert!(lib.contains(&entry), "ttir_compiler_id does not hash ttir/{n}");
        }
    }
}
