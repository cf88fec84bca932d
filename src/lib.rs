//! flux-converger: lets a GitOps tool (Flux's Kustomizations and HelmReleases, Argo CD's
//! Applications) carry a grown StatefulSet volume size.
//!
//! # Layout
//!
//! The flow, from the outside in: `main.rs` parses the CLI and calls one of `cmd::*`; each
//! command reads its input, calls the pure core (`quantity`, `decide`, `flux::substitute`)
//! and, where it must touch a cluster, the I/O edges (`cluster`, `journal`, `flux::artifact`,
//! `flux::render`) through `converge`.
//!
//! The service, in four hops from `main.rs`, each named in the file before it:
//! 1. `cmd::serve::run`: the flags → a `service::Config`, then the service started;
//! 2. [`service::start_with`] (`service/start.rs`): the parts, the leadership, the servers,
//!    and one [`service::lane::Lane`] with every gated kind on it;
//! 3. [`service::lane::Lane::work`]: the workers, taking keys (`model::Key`: kind, namespace,
//!    name) from the one queue;
//! 4. [`service::kind::GatedKind::run`]: one run of one object of its kind
//!    (`service/kustomization.rs` → `service::gate::Gate::run`, `service/helmrelease.rs`),
//!    each converging through the shared [`service::step::ConvergeStep`].
//!
//! Imports point down the layers (docs/README.md, *Module map*): the pure core, the kube
//! edge (`cluster`), the domain edges, `records`, `http`, `storage`, `service`, the binary;
//! `hack/module-cycles` fails CI on a cycle or an upward import.

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
