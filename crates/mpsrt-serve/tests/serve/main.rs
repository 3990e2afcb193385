//! Integration tests of mpsrt-serve against the test double backend (loopback, ephemeral ports).

mod common;
mod fuzz;
mod gpus;
mod grpc;
mod hardening;
mod http;
mod load;
mod repository;
mod tritonclient;
mod warmup;
