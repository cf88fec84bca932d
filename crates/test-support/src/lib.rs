//! What flux-converger's integration tests, examples and benches share besides the fake API
//! server (`fake_apiserver`): stand-ins for the Flux controllers and for the service's backend,
//! source-controller's archives and artifact server, the objects several tests grow, the RBAC
//! check over the fake's authorization log, and the service's [`Config`] as tests start it.
//!
//! A crate of its own so each of these is compiled once, not once per test binary and example
//! that used to include it with `#[path]`.
//!
//! [`Config`]: flux_converger::service::Config

pub mod argocd_standin;
pub mod flux_archive;
pub mod flux_standin;
pub mod http_standin;
pub mod intent;
pub mod rbac_check;
pub mod resizer;
pub mod service;
pub mod web;
