//! Concat of more parts than one dispatch binds (`MAX_CONCAT_INPUTS`): the GPU joins them in
//! column windows, one dispatch per chunk; bit-identical to the CPU reference, with an empty
//! part, a view at an offset and packed f16 parts.

mod common;
use common::*;
use mpsrt_kernels::MAX_CONCAT_INPUTS;
use mpsrt_tensor::{concat, DType, Tensor};

#[test]
fn concat_past_one_dispatch_matches_cpu() {
    // DenseNet-style widths, two and a half dispatches' worth of parts.
    let n = 2 * MAX_CONCAT_INPUTS + 5;
    for dtype in [DType::F32, DType::F16] {
        let parts: Vec<Tensor> = (0..n)
            .map(|i| {
                let c = [1, 3, 0, 7, 2][i % 5];
                tensor(&values(2 * c * 9, 300 + i as u64, false), &[2, c, 3, 3], dtype)
            })
            .collect();
        let big = tensor(&values(2 * 6 * 9, 9, false), &[2, 6, 3, 3], dtype);
        let view = big.slice(1, Some(2), Some(5), 1).unwrap();
        let mut refs: Vec<&Tensor> = parts.iter().collect();
        refs.insert(MAX_CONCAT_INPUTS, &view);
        let cpu = concat(&refs, 1).unwrap();
        for p in gpus() {
            let on: Vec<Tensor> = refs.iter().map(|t| t.to(p).unwrap()).collect();
            let got = concat(&on.iter().collect::<Vec<_>>(), 1).unwrap();
            assert_eq!(got.shape(), cpu.shape());
            assert_eq!(got.to_bytes().unwrap(), cpu.to_bytes().unwrap(), "{dtype} on {p}");
        }
    }
}
