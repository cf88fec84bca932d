//! flux-converger's integration tests, as one binary: one module per area (each was a file of
//! `tests/` and its own binary before), so the dependency tree is linked once and the fake API
//! server (`fake_apiserver`) and the other helpers (`test_support`) are compiled once, as
//! crates of the workspace. A root-package test, so `CARGO_BIN_EXE_flux-converger` (the
//! binary the CLI tests spawn) is set. `tests/bombs.rs` stays apart: see `Cargo.toml`.
//!
//! `cargo test --test it <module>::` runs one area.

mod argocd;
mod argocd_service;
mod argocd_standin;
mod artifact;
mod attributes_table;
mod converge;
mod dashboard_browser;
mod decide_table;
mod fake_apiserver;
mod fake_attributes;
mod fake_claim_status;
mod fake_eviction;
mod fleet;
mod flux_standin;
mod gate;
mod gate_artifact;
mod helm_render;
mod helm_service;
mod http;
mod http_edge;
mod intents;
mod manifests;
mod plan_cli;
mod queue_fairness;
mod rbac;
mod recovery_table;
mod render;
mod render_confine;
mod render_sandbox;
mod serve_cli;
mod service;
mod shards;
mod storage;
mod substitute_table;
mod toy_kind;
mod volumes_attributes;
mod volumes_cli;
mod volumes_converge;
mod volumes_gate;
mod volumes_helm;
mod volumes_restart;
mod volumes_service;
mod watched;
mod wire;
