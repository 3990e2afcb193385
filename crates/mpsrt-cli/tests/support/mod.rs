//! Helpers shared by the CLI's integration tests that start `mpsrt serve`.

use std::net::TcpListener;

/// Three distinct free ports: the listeners are held until all three are chosen, so the OS
/// cannot hand one port out twice (a server given the same port for HTTP and gRPC exits).
pub fn free_ports() -> (u16, u16, u16) {
    let ls: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let port = |i: usize| ls[i].local_addr().unwrap().port();
    (port(0), port(1), port(2))
}
