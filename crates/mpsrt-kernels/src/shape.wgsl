// Data-movement kernels for shape ops, on 32-bit words (f32/i32; narrower dtypes are widened
// by the caller so no two threads ever share a word).
//
// copy_strided — one thread per element: decode the linear index over the (coalesced, ≤ 8-D)
//   shape, read the source through its strides and write the destination through its strides.
//   Concat, stack and pad write each part into a strided window of one output buffer.
// gather — one thread per output element of `x[outer, idx[j], inner]`; the indices were
//   normalised and bounds-checked on the host, adjacent threads read adjacent inner elements.
//
// Both take part in binding windows (mpsrt-tensor/src/gpu/window.rs): a launch past one
// storage binding records one dispatch per range of elements, numbered from `base`, with every
// offset relative to its operand's bound window.
//
// copy_strided meta: 0 ndim, 1 total (this range), 2 src_off (i32), 3 dst_off (i32), 4 grid row
//   width in threads, 5 base, 8.. shape[8], 16.. src strides[8] (i32), 24.. dst strides[8] (i32).
// gather meta: 0 axis_len, 1 inner, 2 nidx, 3 x_off (i32), 4 total (this range), 5 grid row
//   width in threads, 6 base, 7 y_off (first output element bound), 8 idx_off (first index
//   bound), 9 lo, 10 hi: only indices in lo..hi are gathered (the rows of x this pass binds).

struct Meta { w: array<vec4<u32>, 8> };

@group(0) @binding(0) var<storage, read> S: array<u32>;
@group(0) @binding(1) var<storage, read_write> D: array<u32>;
@group(0) @binding(2) var<uniform> M: Meta;

fn mv(i: u32) -> u32 {
    return M.w[i >> 2u][i & 3u];
}

@compute @workgroup_size(256)
fn copy_strided(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x + gid.y * mv(4u);
    if (idx >= mv(1u)) { return; }
    let nd = mv(0u);
    var rem = idx + mv(5u);
    var s = i32(mv(2u));
    var d = i32(mv(3u));
    for (var k = 0u; k < nd; k++) {
        let dim = nd - 1u - k;
        let size = mv(8u + dim);
        let i = i32(rem % size);
        rem = rem / size;
        s += i * bitcast<i32>(mv(16u + dim));
        d += i * bitcast<i32>(mv(24u + dim));
    }
    D[u32(d)] = S[u32(s)];
}

struct GMeta { w: array<vec4<u32>, 3> };

@group(0) @binding(0) var<storage, read> GX: array<u32>;
@group(0) @binding(1) var<storage, read> GI: array<i32>;
@group(0) @binding(2) var<storage, read_write> GY: array<u32>;
@group(0) @binding(3) var<uniform> GM: GMeta;

fn gv(i: u32) -> u32 {
    return GM.w[i >> 2u][i & 3u];
}

// The element thread `gid` of `gather` / `gather4` moves, in the bindings' units: (destination,
// source, 1), or z = 0 past the end or for an index outside this window's rows.
fn gather_at(gid: vec3<u32>) -> vec3<u32> {
    let idx = gid.x + gid.y * gv(5u);
    if (idx >= gv(4u)) { return vec3<u32>(0u); }
    let axis_len = gv(0u);
    let inner = gv(1u);
    let nidx = gv(2u);
    let g = idx + gv(6u);
    let i = g % inner;
    let j = (g / inner) % nidx;
    let o = g / (inner * nidx);
    let src = u32(GI[j - gv(8u)]);
    if (src < gv(9u) || src >= gv(10u)) { return vec3<u32>(0u); }
    return vec3<u32>(g - gv(7u), u32(i32(gv(3u)) + i32((o * axis_len + src) * inner + i)), 1u);
}

@compute @workgroup_size(256)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gather_at(gid);
    if (e.z == 1u) { GY[e.x] = GX[e.y]; }
}

// gather4 — `gather` on vec4 units (rows of a multiple of 4 words at a 4-word offset): the
//   same metadata with `inner`, offsets and counts in vec4s; its own bindings 0 and 2.
@group(0) @binding(0) var<storage, read> GX4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> GY4: array<vec4<u32>>;

@compute @workgroup_size(256)
fn gather4(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gather_at(gid);
    if (e.z == 1u) { GY4[e.x] = GX4[e.y]; }
}
