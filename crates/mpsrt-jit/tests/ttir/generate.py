"""Regenerates the TTIR fixtures of `tests/ttir.rs` with real Triton (pinned in
python/requirements-dev.txt) from the kernels of python/tests/test_triton_backend.py and
test_triton_features.py:

    TRITON_DEFAULT_BACKEND=wgpu .venv/bin/python crates/mpsrt-jit/tests/ttir/generate.py

Each kernel is specialized (`warmup`, nothing runs) through the mpsrt `wgpu` backend, whose TTIR
stage is Triton's own pass pipeline; the TTIR text (with `loc(...)` locations, paths made
relative) is written next to this script. Needs a GPU adapter (lavapipe is enough)."""
import importlib.util
import os
import pathlib
import re
import sys

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # run the stages even when Triton has them cached
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]

import numpy as np  # noqa: E402

import mpsrt  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "test_triton_backend", ROOT / "python" / "tests" / "test_triton_backend.py")
T = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = T
spec.loader.exec_module(T)
spec = importlib.util.spec_from_file_location(
    "test_triton_features", ROOT / "python" / "tests" / "test_triton_features.py")
F = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = F
spec.loader.exec_module(F)


def dev(shape, dtype="float32"):
    return mpsrt.to_tensor(np.zeros(shape, dtype=dtype), place="mps")


from mpsrt.triton_backend import compiler  # noqa: E402

_seen = []
_make_wgsl = compiler.WgpuBackend.make_wgsl


def _capture(mod, metadata, opt):
    _seen.append(str(mod))  # the text the wgsl stage hands to Rust
    return _make_wgsl(mod, metadata, opt)


compiler.WgpuBackend.make_wgsl = staticmethod(_capture)


def write(name, warmup):
    try:
        warmup()
    except Exception as e:  # fixtures of unsupported ops fail in the wgsl stage, as they should
        print(f"{name}: {str(e).splitlines()[0]}")
    text = _seen.pop()
    # Locations name this checkout's files; keep only the path below the repository.
    text = text.replace(str(ROOT) + "/", "")
    text = re.sub(r'"/[^"]*/site-packages/', '"site-packages/', text)
    (HERE / f"{name}.ttir").write_text(text)
    print(f"{name}.ttir: {len(text.splitlines())} lines")


x, y, o = dev(4096), dev(4096), dev(4096)
write("01_vector_add", lambda: T.add_kernel.warmup(x, y, o, 4096, BLOCK_SIZE=1024, grid=(1, )))
s = dev((64, 781))
write("02_fused_softmax", lambda: T.softmax_kernel.warmup(s, s, 781, 781, 64, 781, BLOCK_SIZE=1024,
                                                  num_stages=2, num_warps=8, grid=(1, )))
a, b, c = dev((128, 64), "float16"), dev((64, 128), "float16"), dev((128, 128), "float16")
mm = T.matmul_kernel.fn  # the @triton.jit function under @triton.autotune
for act in ("", "leaky_relu"):
    write("03_matmul" + ("_leaky_relu" if act else ""), lambda: mm.warmup(
        a, b, c, 128, 128, 64, 64, 1, 128, 1, 128, 1, BLOCK_SIZE_M=64, BLOCK_SIZE_N=32,
        BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION=act, num_warps=4, grid=(1, )))
a, b, c = dev((256, 256), "float16"), dev((256, 256), "float16"), dev((256, 256), "float16")
write("03_matmul_128x128", lambda: mm.warmup(
    a, b, c, 256, 256, 256, 256, 1, 256, 1, 256, 1, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128,
    BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="", num_warps=8, grid=(1, )))
ln = dev((8, 300))
w = dev(300)
write("05_layer_norm_fwd", lambda: T._layer_norm_fwd_fused.warmup(
    ln, ln, w, w, w, w, 300, 300, 1e-5, BLOCK_SIZE=128, num_warps=1, grid=(1, )))
t = dev((37, 29))
write("tile_stats_2d", lambda: T.tile_stats_kernel.warmup(t, t, t, t, 37, 29, 29, BM=16, BN=8,
                                                  grid=(1, )))
c = dev((13, 30), "int32")
write("cumsum", lambda: T.cumsum_kernel.warmup(c, c, c, 13, 30, BM=16, BN=32, grid=(1, )))
write("unsupported_op", lambda: T.unsupported_kernel.warmup(dev(8, "int32"), 8, BLOCK=8, grid=(1, )))
r = dev((5, 7))
write("argmax", lambda: F.argmax_rows_kernel.warmup(r, dev(5, "int32"), dev(7, "int32"), dev(5), 5, 7,
                                                   BLOCK_M=8, BLOCK_N=8, grid=(1, )))
write("argmax_flat", lambda: F.argmax_flat_kernel.warmup(x, dev(1, "int32"), 300, BLOCK=512,
                                                      grid=(1, )))
xi = dev(64, "int32")
write("atomics", lambda: F.atomics_kernel.warmup(x, xi, dev(8, "int32"), dev(1), dev(4, "int32"), dev(2),
                                               dev(2), 64, BLOCK=32, grid=(2, )))
write("xchg_cas", lambda: F.xchg_cas_kernel.warmup(dev(8, "int32"), dev(32, "int32"), dev(4, "int32"),
                                                 dev(8, "int32"), BLOCK=8, grid=(4, )))
d = dev((37, 64))
write("tensor_descriptor", lambda: F.descriptor_kernel.warmup(d, dev((37, 50)), 37, 50, 64, BM=16,
                                                             BN=16, grid=(3, )))
# Layout choice / one-barrier reductions (tests/ttir_layout.rs; kernels of test_triton_layout.py).
spec = importlib.util.spec_from_file_location(
    "test_triton_layout", ROOT / "python" / "tests" / "test_triton_layout.py")
L = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = L
spec.loader.exec_module(L)
rs = dev((9, 200))
write("row_stats", lambda: L.row_stats_kernel.warmup(rs, rs, dev((9, 3)), 9, 200, BLOCK=256,
                                                    num_warps=8, grid=(4, )))
write("steer", lambda: L.steer_kernel.warmup(dev(50), dev(50), 50, BLOCK=64, num_warps=2,
                                            grid=(1, )))
