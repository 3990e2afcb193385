"""Where does the `@jit` vector add lose bandwidth? Times, at N f32 elements (default 16M): the tutorial
launch (output from `empty_like`), the same kernel into a preallocated output, its generated
WGSL launched raw, the previous codegen's WGSL (loops over runtime-indexed private arrays), a hand-written scalar WGSL kernel with the same 1024-element programs, and
mpsrt's built-in add; and, to tell the grid shape from the size, the kernel with 4096-element
programs (512 invocations, 8 elements each). The raw-WGSL cases need a 1-D grid (N <= 64M - 1024).
Usage: python3 bench/jit_probe.py [N [ITERS]] (GPU machine; ITERS default 200)."""
import importlib.util
import json
import pathlib
import struct
import sys
import time
import types

import mpsrt

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.modules["torch"] = types.SimpleNamespace(Tensor=mpsrt.Tensor, empty_like=mpsrt.empty_like)
spec = importlib.util.spec_from_file_location(
    "va", ROOT / "crates/mpsrt-jit/tests/kernels/01_vector_add.py")
va = importlib.util.module_from_spec(spec)
spec.loader.exec_module(va)

# The bindings and uniform block of the generated kernel, shared by both hand-made variants.
HEADER = """
struct Params { np0: u32, np1: u32, np2: u32, disp_x: u32, disp_y: u32, off0: i32, off1: i32,
                off2: i32, s3: i32, }
@group(0) @binding(0) var<storage, read> buf0: array<f32>;
@group(0) @binding(1) var<storage, read> buf1: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf2: array<f32>;
@group(0) @binding(3) var<uniform> P: Params;
"""

OLD = HEADER + """fn ld0(p: i32) -> f32 { let j = u32(p + P.off0); return buf0[j]; }
fn ld1(p: i32) -> f32 { let j = u32(p + P.off1); return buf1[j]; }
fn st2(p: i32, v: f32) { let j = u32(p + P.off2); buf2[j] = v; }
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lin = wid.x + P.disp_x * (wid.y + P.disp_y * wid.z);
    if (lin >= P.np0 * P.np1 * P.np2) { return; }
    let pid0 = i32(lin % P.np0);
    let t1: i32 = pid0 * 1024i;
    var t2: array<i32, 4>;
    for (var i = 0u; i < 4u; i++) { let e = i * 256u + lid; t2[i] = i32(e) + 0i; }
    var t3: array<i32, 4>;
    for (var i = 0u; i < 4u; i++) { t3[i] = t1 + t2[i]; }
    var t4: array<bool, 4>;
    for (var i = 0u; i < 4u; i++) { t4[i] = t3[i] < P.s3; }
    var t5: array<f32, 4>;
    for (var i = 0u; i < 4u; i++) { if (t4[i]) { t5[i] = ld0(t3[i]); } else { t5[i] = 0.0f; } }
    var t6: array<f32, 4>;
    for (var i = 0u; i < 4u; i++) { if (t4[i]) { t6[i] = ld1(t3[i]); } else { t6[i] = 0.0f; } }
    var t7: array<f32, 4>;
    for (var i = 0u; i < 4u; i++) { t7[i] = t5[i] + t6[i]; }
    for (var i = 0u; i < 4u; i++) { if (t4[i]) { st2(t3[i], t7[i]); } }
}
"""

HAND = HEADER + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let base = i32(wid.x) * 1024 + i32(lid);
    let o0 = base; let o1 = base + 256; let o2 = base + 512; let o3 = base + 768;
    if (o0 < P.s3) { buf2[o0] = buf0[o0] + buf1[o0]; }
    if (o1 < P.s3) { buf2[o1] = buf0[o1] + buf1[o1]; }
    if (o2 < P.s3) { buf2[o2] = buf0[o2] + buf1[o2]; }
    if (o3 < P.s3) { buf2[o3] = buf0[o3] + buf1[o3]; }
}
"""


def timed(fn, iters=int(sys.argv[2]) if len(sys.argv) > 2 else 200):
    for _ in range(5):
        fn()
    mpsrt.mps.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    mpsrt.mps.synchronize()
    return (time.perf_counter() - t0) / iters


n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
x = mpsrt.rand([n], "float32", "gpu")
y = mpsrt.rand([n], "float32", "gpu")
out = mpsrt.empty_like(x)
grid = n // 1024
meta = struct.pack("<9I", grid, 1, 1, grid, 1, 0, 0, 0, n)
grid4k = (n + 4095) // 4096
cases = {
    "tutorial add() (empty_like + launch)": lambda: va.add(x, y),
    "launch into preallocated out": lambda: va.add_kernel[(grid,)](x, y, out, n, BLOCK_SIZE=1024),
    "4096-element programs, 16 warps, preallocated out":
        lambda: va.add_kernel[(grid4k,)](x, y, out, n, BLOCK_SIZE=4096, num_warps=16),
    "builtin x + y": lambda: x + y,
}
if grid <= 65535:
    gen = mpsrt.compile_kernel(va.add_kernel.compile(x, y, out, n, BLOCK_SIZE=1024), "main")
    hand = mpsrt.compile_kernel(HAND, "main")
    old = mpsrt.compile_kernel(OLD, "main")
    cases["generated WGSL, raw launch"] = lambda: gen(x, y, out, grid=(grid,), uniforms=meta)
    cases["previous codegen (runtime-indexed loops), raw launch"] = \
        lambda: old(x, y, out, grid=(grid,), uniforms=meta)
    cases["hand-written scalar WGSL"] = lambda: hand(x, y, out, grid=(grid,), uniforms=meta)
cases |= {
    "empty_like alone": lambda: mpsrt.empty_like(x),
    "zeros_like alone": lambda: mpsrt.zeros_like(x),
}
for name, fn in cases.items():
    s = timed(fn)
    print(json.dumps({"case": name, "n": n, "us": s * 1e6, "gbps": 12.0 * n / s / 1e9}), flush=True)
