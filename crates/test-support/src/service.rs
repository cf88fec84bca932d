//! The service's [`Config`] as the tests start it: on loopback ports the kernel picks, hooks
//! taken without a key and without a rate limit (the tests about who may post, or how often,
//! set those themselves), no resync within a test's life, API calls bounded at 5 s. Everything
//! else is [`Config::builder`]'s flag defaults; a test sets what it is about on the builder.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use flux_converger::service::{Config, ConfigBuilder};

/// `127.0.0.1:0`.
pub const LOOPBACK_ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// A test's service config, results and intents in `namespace`.
pub fn config(namespace: &str) -> ConfigBuilder {
    Config::builder(namespace)
        .listen(LOOPBACK_ANY_PORT)
        .metrics_addr(LOOPBACK_ANY_PORT)
        .allow_unauthenticated_hooks(true)
        .hook_min_interval(Duration::ZERO)
        .resync(Duration::from_secs(3600))
        .call_timeout(Duration::from_secs(5))
}
