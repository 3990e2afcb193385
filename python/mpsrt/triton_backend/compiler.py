"""Triton compiler backend for target `wgpu`: Triton's own frontend and TTIR passes, then the
TTIR text goes to Rust (`mpsrt-jit`), which lowers it to WGSL with the same emitter that
`mpsrt.jit` uses. The binary Triton caches and hands to the driver is the WGSL text; the launch
layout (uniform fields, buffer bindings) travels in the metadata."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from triton._C.libtriton import ir, passes
from triton.backends.compiler import BaseBackend, GPUTarget, Language

from . import BACKEND_NAME, TARGET_ARCH, WARP_SIZE

# Launch-layout codes shared with `_C.triton_launch` (crates/mpsrt-python/src/jit.rs).
_UNIFORM_CODES = {"np0": 0, "np1": 1, "np2": 2, "dx": 3, "dy": 4, "off": 5, "int": 6,
                  "float": 7, "bool": 8}


@dataclass(frozen=True)
class WgpuOptions:
    """Compile options (fields Triton's frontend reads, plus the workgroup caps of
    `driver.set_kernel_config`)."""
    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 1
    warp_size: int = WARP_SIZE
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ()
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: Tuple[str, ...] = ("ieee", "tf32", "tf32x3")
    max_num_imprecise_acc_default: int = 0
    extern_libs: Optional[Tuple] = None
    debug: bool = False
    sanitize_overflow: bool = False
    backend_name: str = BACKEND_NAME
    arch: str = TARGET_ARCH
    instrumentation_mode: str = ""
    fpsan_homomorphic_casts: bool = False
    # Largest workgroup (invocations); 0: num_warps * warp_size.
    max_threads: int = 0

    def hash(self):
        key = "_".join(f"{k}-{v}" for k, v in sorted(self.__dict__.items()))
        return hashlib.sha256(key.encode()).hexdigest()


class WgpuBackend(BaseBackend):
    """TTIR → WGSL for mpsrt's GPUs (`GPUTarget("wgpu", "wgsl", 32)`)."""
    binary_ext = "wgsl"

    @staticmethod
    def supports_target(target: GPUTarget):
        return target.backend == BACKEND_NAME

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        self.binary_ext = "wgsl"

    def hash(self) -> str:
        from .. import _C
        return f"mpsrt-wgpu-{_C.triton_compiler_version()}-{self.target.arch}"

    def parse_options(self, opts) -> Any:
        from .driver import kernel_config
        cfg = kernel_config()
        args = {k: opts[k] for k in WgpuOptions.__dataclass_fields__
                if k in opts and opts[k] is not None}
        for k in ("num_warps", "num_stages", "max_threads"):
            if k not in args and cfg.get(k) is not None:
                args[k] = cfg[k]
        if "extern_libs" in args:
            args["extern_libs"] = tuple(dict(args["extern_libs"]).items())
        for k in ("supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes",
                  "allowed_dot_input_precisions"):
            if k in args:
                args[k] = tuple(args[k])
        return WgpuOptions(**args)

    def pack_metadata(self, metadata):
        return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    def get_codegen_implementation(self, options):
        return {"min_dot_size": lambda lhs_ty, rhs_ty: (1, 1, 1)}

    def get_module_map(self) -> Dict[str, Any]:
        return {}

    def load_dialects(self, ctx):
        pass  # only Triton's core dialects (tt, arith, math, scf), which ir.load_dialects loads

    @staticmethod
    def make_ttir(mod, metadata, opt):
        pm = ir.pass_manager(mod.context)
        pm.enable_debug()
        passes.common.add_inliner(pm)
        passes.ttir.add_rewrite_tensor_descriptor_to_pointer(pm)
        passes.common.add_canonicalizer(pm)
        passes.ttir.add_combine(pm)
        passes.ttir.add_reorder_broadcast(pm)
        passes.common.add_cse(pm)
        passes.common.add_symbol_dce(pm)
        passes.ttir.add_loop_unroll(pm)
        pm.run(mod, "make_ttir")
        return mod

    @staticmethod
    def make_wgsl(mod, metadata, opt):
        from .. import _C
        threads = opt.max_threads or opt.num_warps * opt.warp_size
        # The module text with locations, so errors can name the kernel's source line.
        text = str(mod)
        try:
            # num_warps is a hint: the workgroup may grow (up to the device limit) so that no
            # invocation holds more than 16 elements of a block, and kernels whose work is
            # reductions of small blocks narrow it (8 elements each, at least one subgroup, so
            # a reduction needs no barrier); max_threads is a hard cap.
            k = _C.triton_compile(text, int(threads), widen=not opt.max_threads)
        except Exception as e:  # the Rust error names the op and the kernel's source line
            raise RuntimeError(f"[mpsrt triton backend] {e}") from None
        metadata["name"] = k["name"]
        metadata["shared"] = k["workgroup_bytes"]
        metadata["mpsrt_workgroup_size"] = k["workgroup_size"]
        metadata["mpsrt_uniform"] = [[_UNIFORM_CODES[c], a] for c, a in k["uniform"]]
        metadata["mpsrt_bindings"] = k["bindings"]
        metadata["mpsrt_uniform_size"] = k["uniform_size"]
        return k["wgsl"].encode()

    def add_stages(self, stages, options, language):
        if language != Language.TRITON:
            raise NotImplementedError("the mpsrt wgpu backend compiles Triton kernels, not Gluon")
        stages["ttir"] = lambda src, metadata: self.make_ttir(src, metadata, options)
        stages["wgsl"] = lambda src, metadata: self.make_wgsl(src, metadata, options)
