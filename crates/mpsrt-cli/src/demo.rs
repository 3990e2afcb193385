//! `mpsrt demo`: the Paddle MPS seed's "Basic Usage" and operator examples, on the GPU when one
//! exists (CPU otherwise), checked against the CPU reference and printed with where they ran.

use mpsrt::{device, DType, Place, Tensor};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Force a place (cpu, mps, mps:N); default: the first GPU, else the CPU.
    #[arg(long)]
    place: Option<String>,
}

fn show(name: &str, t: &Tensor) -> mpsrt::Result<()> {
    let v = t.to_f64_vec()?;
    let shown: Vec<String> = v.iter().take(6).map(|x| format!("{x:.4}")).collect();
    println!("  {name:<10} {:?} {} on {}: [{}]", t.shape(), t.dtype(), t.place(), shown.join(", "));
    Ok(())
}

pub fn run(args: DemoArgs) -> mpsrt::Result<()> {
    let place = match args.place {
        Some(p) => device::validate_place(p.parse()?)?,
        None if device::gpu_available() => Place::Gpu(0),
        None => Place::Cpu,
    };
    match place {
        Place::Gpu(i) => println!(
            "GPU available: {} device(s); running on mps:{i} = {}",
            device::device_count(),
            device::gpu_device(i)?.properties().display_name()
        ),
        Place::Cpu => {
            println!("no GPU selected or available: running on the CPU reference backend")
        }
    }
    mpsrt::manual_seed(0);
    let x = mpsrt::randn(&[2, 3], DType::F32, place)?;
    let y = mpsrt::randn(&[2, 3], DType::F32, place)?;
    let z = mpsrt::add(&x, &y)?;
    let w = mpsrt::exp(&x)?;
    println!("basic usage:");
    show("x", &x)?;
    show("x + y", &z)?;
    show("exp(x)", &w)?;
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], place)?;
    let b = Tensor::from_slice(&[4.0f32, 5.0, 6.0], &[3], place)?;
    println!("operator examples:");
    let results = [
        ("add", mpsrt::add(&a, &b)?),
        ("multiply", mpsrt::multiply(&a, &b)?),
        ("abs", mpsrt::abs(&a)?),
        ("exp", mpsrt::exp(&a)?),
        ("log(x+1)", mpsrt::log(&mpsrt::add_scalar(&a, 1.0)?)?),
        ("sqrt", mpsrt::sqrt(&a)?),
        ("relu", mpsrt::relu(&a)?),
        ("sigmoid", mpsrt::sigmoid(&a)?),
    ];
    // Check every result against the CPU reference, as the seed's quick test does.
    let (ac, bc) = (a.to(Place::Cpu)?, b.to(Place::Cpu)?);
    let reference = [
        mpsrt::add(&ac, &bc)?,
        mpsrt::multiply(&ac, &bc)?,
        mpsrt::abs(&ac)?,
        mpsrt::exp(&ac)?,
        mpsrt::log(&mpsrt::add_scalar(&ac, 1.0)?)?,
        mpsrt::sqrt(&ac)?,
        mpsrt::relu(&ac)?,
        mpsrt::sigmoid(&ac)?,
    ];
    for ((name, t), r) in results.iter().zip(&reference) {
        show(name, t)?;
        let diff = t
            .to_f64_vec()?
            .iter()
            .zip(r.to_f64_vec()?)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        println!("  {:<10} ✓ matches CPU reference (max diff {diff:.2e})", "");
    }
    if let Place::Gpu(i) = place {
        let d = device::gpu_device(i)?;
        d.synchronize()?;
        let m = d.memory_stats();
        println!(
            "memory on mps:{i}: {} bytes allocated, {} reserved, peak {}",
            m.allocated, m.reserved, m.peak_allocated
        );
    }
    Ok(())
}
