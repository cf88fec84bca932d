//! One TLS crypto provider for the whole process.
//!
//! kube's rustls is built on `ring`; reqwest 0.13 would default to `aws-lc-rs`. With two
//! providers compiled in, rustls cannot pick one and panics on the first connection, so
//! reqwest is built without a provider and `ring` is installed here, once, at start.

/// Installs `ring` as the process-wide rustls provider. Idempotent: a second call (tests
/// start many clients in one process) keeps the provider already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
