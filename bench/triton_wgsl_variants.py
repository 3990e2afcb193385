"""WGSL surgery for the tutorial-03 K-loop probe (bench/triton_kloop_probe.py, issue 24). Each
variant is the JIT's own WGSL with one suspected cost removed; timing them says where the time
goes (session 14: the epilogue, `noepi`, was 0.16 of 1.44 ms at 4096^3).
  base   unchanged
  nofb   the staged loads' general (per-pair, masked) fallback branch deleted: only the
         whole-run vec4 copy is left in the loop (valid here: 4096 is a multiple of the block);
         with MPSRT_TRITON_JOINT_STAGE=0 (session 13's per-operand branches) both are deleted
  noepi  everything after the K loop replaced by a minimal read-out: each tile coopStoreT'd to
         the scratch and summed into one f32 per invocation (no 64-element per-invocation
         arrays, so no register pressure from the epilogue); output values are garbage
  nocl   the vec4 loads' index clamps (ixv) removed
Variants combine with '+'. (`nofb` can drop every use of an operand's word binding, which the
launcher still binds: then the pipeline is refused.)"""
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
