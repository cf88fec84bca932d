//! The HTTP flags of `serve`: the limits of every listener (`--http-*`, `http::edge`) and who
//! may read the results (`--status-auth`, `http::auth`).

use std::time::Duration;

use clap::ValueEnum;
use flux_converger::http::edge::EdgeLimits;
use flux_converger::http::{HttpConfig, StatusAuthMode};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusAuth {
    /// Whoever reaches --listen reads every result.
    None,
    /// A bearer token checked with a TokenReview; only the Kustomizations a
    /// SubjectAccessReview lets the caller `get` are shown.
    Kubernetes,
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "HTTP")]
pub struct HttpArgs {
    /// Who may read /status and the dashboard (/healthz, /readyz and /hook stay as they are).
    #[arg(long, value_enum, default_value_t = StatusAuth::None, env = "FLUX_CONVERGER_STATUS_AUTH")]
    pub status_auth: StatusAuth,
    /// A connection that has not sent a whole request head within this is closed (an idle
    /// keep-alive connection too), on every port.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration,
          env = "FLUX_CONVERGER_HTTP_HEADER_READ_TIMEOUT")]
    pub http_header_read_timeout: Duration,
    /// The longest a request may take until its answer starts, its body included (408 past it).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration,
          env = "FLUX_CONVERGER_HTTP_REQUEST_TIMEOUT")]
    pub http_request_timeout: Duration,
    /// Connections served at once on each port; further ones wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = EdgeLimits::default().max_connections,
          env = "FLUX_CONVERGER_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: usize,
}

impl HttpArgs {
    pub fn config(&self) -> Result<HttpConfig, String> {
        for (flag, value) in [
            ("--http-header-read-timeout", self.http_header_read_timeout),
            ("--http-request-timeout", self.http_request_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("{flag} must be positive"));
            }
        }
        if self.http_max_connections == 0 {
            return Err("--http-max-connections must be at least 1".into());
        }
        Ok(HttpConfig {
            edge: EdgeLimits {
                header_read_timeout: self.http_header_read_timeout,
                request_timeout: self.http_request_timeout,
                max_connections: self.http_max_connections,
            },
            status_auth: match self.status_auth {
                StatusAuth::None => StatusAuthMode::None,
                StatusAuth::Kubernetes => StatusAuthMode::Kubernetes,
            },
        })
    }
}
