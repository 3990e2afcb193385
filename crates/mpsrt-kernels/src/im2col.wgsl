// im2col for convolutions lowered to the tiled matmul (f32). One thread per element of the
// column tensor col[n][g][k][p] (k = ic·KH·KW + kh·KW + kw over the group's input channels,
// p = oh·OW + ow), zero where the receptive field hits padding. Adjacent threads take adjacent
// output pixels, so reads along an input row and every write are coalesced. With word 22 set
// the layout is col[g][k][n][p] instead: one [K, N·P] matrix per group, so a batched conv on a
// small map runs as one GEMM whose tiles span images.
//
// Meta words (the conv launcher's layout): 0 N, 1 C, 2 H, 3 W, 4 OC, 5 OH, 6 OW, 7 KH, 8 KW,
// 9 SH, 10 SW, 11 PH (top), 12 PW (left), 13 DH, 14 DW, 15 groups, 16 has_bias, 17 x_off,
// 18 w_off, 19 b_off, 20 total column elements, 21 grid row width in threads, 22 layout
// (0 [n][g][k][p], 1 [g][k][n][p]).

struct Meta { w: array<vec4<u32>, 6> };

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Col: array<f32>;
@group(0) @binding(2) var<uniform> M: Meta;

fn mv(i: u32) -> u32 {
    return M.w[i >> 2u][i & 3u];
}

@compute @workgroup_size(256)
fn conv_im2col(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x + gid.y * mv(21u);
    if (idx >= mv(20u)) { return; }
    let C = mv(1u); let H = mv(2u); let W = mv(3u);
    let OH = mv(5u); let OW = mv(6u); let KH = mv(7u); let KW = mv(8u);
    let SH = i32(mv(9u)); let SW = i32(mv(10u)); let PH = i32(mv(11u)); let PW = i32(mv(12u));
    let DH = i32(mv(13u)); let DW = i32(mv(14u)); let G = mv(15u);
    let ICg = C / G;
    let KHW = KH * KW;
    let K = ICg * KHW;
    let P = OH * OW;
    let N = mv(0u);
    let p = idx % P;
    var k: u32;
    var n: u32;
    var g: u32;
    if (mv(22u) == 0u) {
        k = (idx / P) % K;
        let ng = idx / (P * K);
        g = ng % G;
        n = ng / G;
    } else {
        n = (idx / P) % N;
        let gk = idx / (P * N);
        k = gk % K;
        g = gk / K;
    }
    let ic = k / KHW;
    let r = k % KHW;
    let ih = i32(p / OW) * SH - PH + i32(r / KW) * DH;
    let iw = i32(p % OW) * SW - PW + i32(r % KW) * DW;
    var v = 0.0;
    if (ih >= 0 && ih < i32(H) && iw >= 0 && iw < i32(W)) {
        v = X[mv(17u) + ((n * C + g * ICg + ic) * H + u32(ih)) * W + u32(iw)];
    }
    Col[idx] = v;
}
