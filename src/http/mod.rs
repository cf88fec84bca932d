//! The HTTP side of `serve`: `/hook`, `/status`, the dashboard, `/healthz`, `/readyz`, `/metrics`.

pub mod backend;
