# triton request 3 (session 14, helper "triton", final) — needs the working tree at or after a666119
# (defaults: staged copies at the dot, prefetch, array<f16> outputs) in the release wheel. ~55 s.
# The lead's bench/gpu.sh triton has the autotuned tutorials; this only adds:
# 1. python/tests/test_triton_backend.py + test_triton_features.py on the GPU with the final
#    defaults (accuracy, odd sizes; f16 outputs now bound as array<f16> on matrix-unit GPUs).
# 2. K-loop probe (verbatim tutorial 03, 128x128x32 nw 8/4, 4096^3 and 4096x4096x8192, beside the
#    built-in), fresh processes: final defaults vs all three switches off (session 13's
#    loop: MPSRT_TRITON_JOINT_STAGE=0 MPSRT_TRITON_PREFETCH=0 MPSRT_TRITON_F16_STORE=0).
mkdir -p "$OUT/triton/wgsl" /tmp/triton_probe
export TRITON_DEFAULT_BACKEND=wgpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_before.txt" 2>&1
python3 -c 'import mpsrt; print(mpsrt._C.triton_compiler_version())' > "$OUT/triton/version.txt" 2>&1
timeout 40 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE \
  python/tests/test_triton_backend.py python/tests/test_triton_features.py 2>&1 \
  | tail -40 > "$OUT/triton/pytest.txt"
tail -2 "$OUT/triton/pytest.txt"
cat > /tmp/triton_probe/wgsl_variants.py <<'PYEOF'
"""WGSL surgery for the tutorial-03 K-loop probe (session 14, triton helper). Each variant is
the JIT's own WGSL with one suspected cost removed; timing them says which one the 2.7x per
K step comes from.
  base   unchanged
  nofb   the staged loads' general (per-pair, masked) fallback branch deleted: only the
         whole-run vec4 copy is left in the loop (valid here: 4096 is a multiple of the block);
         with MPSRT_TRITON_JOINT_STAGE=0 (session 13's per-operand branches) both are deleted
  noepi  everything after the K loop replaced by a minimal read-out: each tile coopStoreT'd to
         the scratch and summed into one f32 per invocation (no 64-element per-invocation
         arrays, so no register pressure from the epilogue); output values are garbage
  nocl   the vec4 loads' index clamps (ixv) removed
Variants combine with '+'."""
import re


def _match(src, i):
    """Index just past the brace block opening at src[i] == '{'."""
    assert src[i] == "{", src[i:i + 40]
    d = 0
    for j in range(i, len(src)):
        if src[j] == "{":
            d += 1
        elif src[j] == "}":
            d -= 1
            if d == 0:
                return j + 1
    raise ValueError("unbalanced")


def nofb(w):
    one = r"full\d+ && hb\d+_ok && \(\(off\d+ \+ P\.off\d+\) & 7i\) == 0i"
    pat = re.compile(r"if \(" + one + r"(?: && " + one + r")*\) \{")
    n = 0
    while True:
        m = pat.search(w)
        if not m:
            break
        ob = m.end() - 1
        fe = _match(w, ob)
        rest = w[fe:]
        assert rest.startswith(" else {"), rest[:40]
        eb = fe + len(" else ")
        ee = _match(w, eb)
        w = w[:m.start()] + w[ob:fe] + w[ee:]
        n += 1
    assert n in (1, 2), n
    return w


def noepi(w):
    loop = w.index("for (var iv")
    ob = w.index("{", loop)
    le = _match(w, ob)
    tiles = re.findall(r"var (cacc\d+_\d+) = coop_mat(\d+)x\d+<f32, C>", w)
    cac = re.search(r"var<workgroup> (cac\d+): array<f32, (\d+)>", w).group(1)
    wg = int(re.search(r"@workgroup_size\((\d+)\)", w).group(1))
    s = int(tiles[0][1])
    epi = ["\n    var probe_s = 0.0f;"]
    for t, _ in tiles:
        epi.append(f"    coopStoreT({t}, &{cac}[sg * {s * s}u], {s}u);")
        epi.append("    workgroupBarrier();")
        epi.append(f"    probe_s += {cac}[lid];")
        epi.append("    workgroupBarrier();")
    epi.append(f"    st2(i32(lin) * {wg}i + i32(lid), probe_s);")
    end = w.rindex("}")
    return w[:le] + "\n".join(epi) + "\n" + w[end:]


def nocl(w):
    w = re.sub(r"bufv(\d+)\[ixv\d+\(", r"bufv\1[(", w)
    return w


VARIANTS = {"nofb": nofb, "noepi": noepi, "nocl": nocl}


def transform(w, name):
    for part in name.split("+"):
        if part != "base":
            w = VARIANTS[part](w)
    return w


if __name__ == "__main__":
    import sys
    src = open(sys.argv[1]).read()
    sys.stdout.write(transform(src, sys.argv[2]))
PYEOF
cat > /tmp/triton_probe/probe.py <<'PYEOF'
"""Tutorial-03 K-loop probe (session 14, triton helper): the verbatim tutorial kernel through
real Triton at fixed 128x128x32 configs (num_warps 8 and 4), its WGSL rewritten by one variant
of wgsl_variants.py before the pipeline is built; device time at 4096^3 and 4096x4096x8192
(the K slope) beside the built-in GEMM. Usage: probe.py VARIANT (one variant per process)."""
import json
import os
import sys
import tempfile

os.environ["TRITON_DEFAULT_BACKEND"] = "wgpu"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import mpsrt  # noqa: E402
import triton  # noqa: E402
from wgsl_variants import transform  # noqa: E402

VARIANT = sys.argv[1]
OUTDIR = sys.argv[2] if len(sys.argv) > 2 else None
_orig = mpsrt._C.triton_compile


def patched(text, threads, widen=False):
    k = dict(_orig(text, threads, widen=widen))
    if "coop_mat" in k["wgsl"]:
        k["wgsl"] = transform(k["wgsl"], VARIANT)
        if OUTDIR:
            js = os.environ.get("MPSRT_TRITON_JOINT_STAGE", "1")
            pf = os.environ.get("MPSRT_TRITON_PREFETCH", "1")
            hs = os.environ.get("MPSRT_TRITON_F16_STORE", "1")
            with open(os.path.join(OUTDIR, f"{VARIANT}_js{js}_pf{pf}_hs{hs}_{threads}.wgsl"), "w") as f:
                f.write(k["wgsl"])
    return k


mpsrt._C.triton_compile = patched
sys.path.insert(0, "bench")
import triton_backend as B  # noqa: E402
from triton.runtime import driver  # noqa: E402

from mpsrt.triton_backend.driver import WgpuDriver, device_time  # noqa: E402

driver.set_active(WgpuDriver())
T = B.load_tutorials()
fn0 = T.matmul_kernel.fn
rng = np.random.default_rng(0)


def dms(fn):
    fn()
    mpsrt.mps.synchronize()
    for _ in range(30):
        fn()
    mpsrt.mps.synchronize()
    t = sorted(device_time(fn, reps=7))
    return t[len(t) // 2]


S = int(os.environ.get('PROBE_SIZE', '4096'))
for K in (S, 2 * S):
    M = N = S
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    ta, tb = mpsrt.to_tensor(a, place="mps"), mpsrt.to_tensor(b, place="mps")
    want = None
    for nw in (8, 4):
        cfg = triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32,
                             'GROUP_SIZE_M': 8}, num_warps=nw)
        T.matmul_kernel = triton.autotune(configs=[cfg], key=['M', 'N', 'K'])(fn0)
        rec = dict(probe="variant", variant=VARIANT, K=K, num_warps=nw,
                   joint=os.environ.get("MPSRT_TRITON_JOINT_STAGE", "1"),
                   prefetch=os.environ.get("MPSRT_TRITON_PREFETCH", "1"),
                   f16_store=os.environ.get("MPSRT_TRITON_F16_STORE", "1"))
        try:
            out = T.matmul(ta, tb)
            if "noepi" not in VARIANT and K == S:
                if want is None:
                    want = a.astype(np.float32) @ b.astype(np.float32)
                got = out.numpy().astype(np.float32)
                rec["rel_err"] = float(np.abs(got - want).max() / np.abs(want).max())
            ms = dms(lambda: T.matmul(ta, tb))
            rec.update(device_ms=ms, tflops=2.0 * M * N * K / ms / 1e9)
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e)[:400]
        print(json.dumps(rec), flush=True)
    if VARIANT == "base":
        ms = dms(lambda: mpsrt.matmul(ta, tb))
        print(json.dumps(dict(probe="builtin", K=K, device_ms=ms,
                              tflops=2.0 * M * N * K / ms / 1e9)), flush=True)
PYEOF
run_probe() {  # $1 = off: session 13's loop (all three switches off)
  echo "== probe $1"
  if [ "$1" = off ]; then
    env MPSRT_TRITON_JOINT_STAGE=0 MPSRT_TRITON_PREFETCH=0 MPSRT_TRITON_F16_STORE=0 timeout 20 \
      python3 /tmp/triton_probe/probe.py base 2>&1 | grep -v XDG | tee -a "$OUT/triton/probe.jsonl"
  else
    timeout 20 python3 /tmp/triton_probe/probe.py base "$OUT/triton/wgsl" 2>&1 \
      | grep -v XDG | tee -a "$OUT/triton/probe.jsonl"
  fi
}
run_probe final
run_probe off
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_after.txt" 2>&1
