//! flux-converger: lets a Flux Kustomization carry a grown StatefulSet volume size.
//!
//! The flow, from the outside in: `main.rs` parses the CLI and calls one of `cmd::*`;
//! each command reads its input, calls the pure core (`quantity`, `decide`,
//! `flux::substitute`) and, where it must touch a cluster, the I/O edges
//! (`cluster`, `journal`, `flux::artifact`, `flux::render`) through `converge`.

pub mod argocd;
pub mod cluster;
pub mod commands;
pub mod converge;
pub mod decide;
pub mod digest;
pub mod flux;
pub mod gated;
pub mod helm;
pub mod http;
pub mod journal;
pub mod manifest;
pub mod model;
pub mod quantity;
pub mod records;
pub mod redact;
pub mod service;
pub mod storage;
pub mod tls;
pub mod volume;
pub mod wire;
