//! The `mpsrt` binary: argument parsing and output only; the work is in the library crates.

mod bench;
mod demo;
mod info;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mpsrt",
    version,
    about = "GPU deep-learning runtime for Apple Silicon (Metal) and any Vulkan GPU"
)]
struct Cli {
    /// Log level filter (error, warn, info, debug, trace); also RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show devices, backends, features, limits and memory.
    Info(info::InfoArgs),
    /// Run the seed's basic-usage demo on the GPU (CPU if none) and print what ran where.
    Demo(demo::DemoArgs),
    /// Micro-benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or(cli.log.clone());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = match cli.command {
        Command::Info(a) => info::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(c) => bench::run(c),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
