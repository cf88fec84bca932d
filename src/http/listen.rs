//! Binding the service's HTTP ports.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::TcpListener;

/// Binds `addr`. `[::]` (what `:PORT` means) listens on IPv6 and IPv4 at once, as Go's
/// `net.Listen(":PORT")` does for Flux; on a node without IPv6 it falls back to `0.0.0.0`, so
/// the same manifest serves single-stack IPv4, single-stack IPv6 and dual-stack clusters.
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(listener),
        Err(error)
            if addr.ip().is_unspecified()
                && addr.is_ipv6()
                && !matches!(
                    error.kind(),
                    io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied
                ) =>
        {
            let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port());
            tracing::debug!(%error, %addr, fallback = %v4, "no IPv6: listening on IPv4 only");
            TcpListener::bind(v4).await
        }
        Err(error) => Err(error),
    }
}
