use mpsrt_tensor::{self as mt, Place, Tensor};
fn main() {
    let cases: &[(f32, f32)] = &[
        (-2.5, f32::INFINITY),
        (f32::NEG_INFINITY, 0.5),
        (f32::NEG_INFINITY, 3.0),
        (f32::NEG_INFINITY, -0.5),
        (-0.0, -1.0),
        (-0.0, 0.5),
        (-1.0, f32::INFINITY),
        (0.0, -0.5),
        (f32::INFINITY, -2.0),
        (-3.7, 2.0),
        (-0.5, f32::NEG_INFINITY),
        (-1.5, f32::NEG_INFINITY),
    ];
    let a: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let b: Vec<f32> = cases.iter().map(|c| c.1).collect();
    let ta = Tensor::from_slice(&a, &[a.len()], Place::Cpu).unwrap();
    let tb = Tensor::from_slice(&b, &[b.len()], Place::Cpu).unwrap();
    let c = mt::pow(&ta, &tb).unwrap().to_vec::<f32>().unwrap();
    let g = mt::pow(&ta.to(Place::Gpu(0)).unwrap(), &tb.to(Place::Gpu(0)).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for i in 0..a.len() {
        println!("{} ** {} cpu {} gpu {}", a[i], b[i], c[i], g[i]);
    }
}
