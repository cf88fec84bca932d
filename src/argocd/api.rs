//! The Argo CD API server client: the one call the converger makes there,
//! `GET /api/v1/applications/{name}/managed-resources?appNamespace=&project=`, which answers
//! the objects the application-controller applies (its cache of them; nothing in the cluster
//! holds them).
//!
//! Over HTTPS only, the server's certificate verified (against `--argocd-ca-file` alone when
//! given, else the platform's roots), with a bearer token read from a file at each call (a
//! mounted Secret rotates) and a cap on the body read (`--max-unpacked-size`, checked while
//! streaming, not only against `Content-Length`). The token needs only `applications, get`.
//! No error, log line or `Debug` output carries the token: it is never stored outside the call,
//! its header is marked sensitive, and any text from the server is scrubbed of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;

/// The client's configuration (the lane's flags).
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// `--argocd-server`: `https://host[:port]`, optionally with a path prefix (`--rootpath`).
    pub server: String,
    /// `--argocd-token-file`.
    pub token_file: PathBuf,
    /// `--argocd-ca-file`: the only roots trusted when set.
    pub ca_file: Option<PathBuf>,
    /// Bounds each call, connect to last byte.
    pub timeout: Duration,
    /// `--max-unpacked-size`: the most bytes of a body read.
    pub max_body: u64,
}

/// A failed call, never carrying the token.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("--argocd-server {url:?} is not an https URL: {message}")]
    BadServer { url: String, message: String },
    #[error("reading the Argo CD token file {path}: {error}")]
    TokenFile {
        path: String,
        #[source]
        error: std::io::Error,
    },
    #[error("the Argo CD token file {path} is empty")]
    EmptyToken { path: String },
    #[error("the Argo CD CA file {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("building the Argo CD API client: {0}")]
    Client(String),
    #[error("GET {url}: {message}")]
    Connection { url: String, message: String },
    #[error("GET {url}: HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("GET {url}: the answer is over the {max}-byte cap (--max-unpacked-size)")]
    TooLarge { url: String, max: u64 },
}

impl ApiError {
    /// The metric label of a failed call.
    pub fn label(&self) -> &'static str {
        match self {
            ApiError::BadServer { .. } | ApiError::Client(_) => "config",
            ApiError::TokenFile { .. } | ApiError::EmptyToken { .. } => "token",
            ApiError::CaFile { .. } => "ca",
            ApiError::Connection { .. } => "connection",
            ApiError::Status { status: 401, .. } | ApiError::Status { status: 403, .. } => {
                "unauthorized"
            }
            ApiError::Status { .. } => "status",
            ApiError::TooLarge { .. } => "too_large",
        }
    }
}

/// The client. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ArgoCdApi {
    client: reqwest::Client,
    base: reqwest::Url,
    token_file: PathBuf,
    max_body: u64,
}

/// The most of an error body quoted in an error.
const QUOTED: usize = 512;

impl ArgoCdApi {
    /// Checks the URL, reads the CA file and builds the client (the rustls provider must be
    /// installed first, `tls::install_crypto_provider`). The token is read at each call.
    pub fn new(options: &ApiOptions) -> Result<Self, ApiError> {
        let bad = |message: String| ApiError::BadServer {
            url: options.server.clone(),
            message,
        };
        let mut base = reqwest::Url::parse(&options.server).map_err(|e| bad(e.to_string()))?;
        if base.scheme() != "https" {
            return Err(bad("the Argo CD API is only called over TLS".into()));
        }
        if base.cannot_be_a_base() || base.host_str().is_none() {
            return Err(bad("no host".into()));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        base.set_fragment(None);
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &options.ca_file {
            let ca_error = |message: String| ApiError::CaFile {
                path: path.display().to_string(),
                message,
            };
            let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_error("no PEM certificate in it".into()));
            }
            builder = builder.tls_certs_only(certs);
        }
        let client = builder
            .build()
            .map_err(|e| ApiError::Client(error_chain(&e)))?;
        Ok(ArgoCdApi {
            client,
            base,
            token_file: options.token_file.clone(),
            max_body: options.max_body,
        })
    }

    /// The URL of `name`'s managed resources (an Application in `app_namespace`, of `project`).
    pub fn managed_resources_url(
        &self,
        app_namespace: &str,
        name: &str,
        project: &str,
    ) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend([
                "api",
                "v1",
                "applications",
                name,
                "managed-resources",
            ]);
        }
        url.query_pairs_mut()
            .append_pair("appNamespace", app_namespace)
            .append_pair("project", project);
        url
    }

    /// The managed-resources answer's bytes (for `managed::statefulsets`), read under the cap.
    pub async fn managed_resources(
        &self,
        app_namespace: &str,
        name: &str,
        project: &str,
    ) -> Result<Vec<u8>, ApiError> {
        let url = self.managed_resources_url(app_namespace, name, project);
        let shown = url.to_string();
        let token = read_token(&self.token_file)?;
        let scrub = |text: String| text.replace(token.as_str(), "*****");
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ApiError::EmptyToken {
                path: self.token_file.display().to_string(),
            })?;
        value.set_sensitive(true);
        let response = self
            .client
            .get(url)
            .header(reqwest::header::AUTHORIZATION, value)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| ApiError::Connection {
                url: shown.clone(),
                message: scrub(error_chain(&e)),
            })?;
        let status = response.status();
        if !status.is_success() {
            let body = read_capped(response, QUOTED as u64)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).trim().to_string();
            return Err(ApiError::Status {
                url: shown,
                status: status.as_u16(),
                message: scrub(argo_message(&text)),
            });
        }
        if response.content_length().is_some_and(|n| n > self.max_body) {
            return Err(ApiError::TooLarge {
                url: shown,
                max: self.max_body,
            });
        }
        read_capped(response, self.max_body)
            .await
            .map_err(|e| match e {
                Capped::Over => ApiError::TooLarge {
                    url: shown.clone(),
                    max: self.max_body,
                },
                Capped::Read(message) => ApiError::Connection {
                    url: shown.clone(),
                    message: scrub(message),
                },
            })
    }
}

/// The token file's content, trimmed (a Secret's value often ends in a newline).
fn read_token(path: &Path) -> Result<String, ApiError> {
    let text = std::fs::read_to_string(path).map_err(|error| ApiError::TokenFile {
        path: path.display().to_string(),
        error,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ApiError::EmptyToken {
            path: path.display().to_string(),
        });
    }
    Ok(token.to_owned())
}

enum Capped {
    Over,
    Read(String),
}

/// The body, failing as soon as it passes `max` bytes.
async fn read_capped(response: reqwest::Response, max: u64) -> Result<Vec<u8>, Capped> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Capped::Read(error_chain(&e)))?;
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(Capped::Over);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Argo CD's gRPC-gateway error body is `{"error": ..., "code": N, "message": ...}`: its
/// message, else the text (cut to [`QUOTED`] bytes).
fn argo_message(text: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| text.to_owned());
    let mut cut = message.len().min(QUOTED);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    message[..cut].to_owned()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(server: &str) -> ApiOptions {
        ApiOptions {
            server: server.into(),
            token_file: "/nonexistent".into(),
            ca_file: None,
            timeout: Duration::from_secs(5),
            max_body: 1024,
        }
    }

    #[test]
    fn urls_are_built_with_escaping_and_the_root_path() {
        crate::tls::install_crypto_provider();
        for (server, expected) in [
            (
                "https://argocd.example.com",
                "https://argocd.example.com/api/v1/applications/db/managed-resources?appNamespace=team+a&project=p%2Fq",
            ),
            (
                "https://argocd.example.com:8443/argo-cd",
                "https://argocd.example.com:8443/argo-cd/api/v1/applications/db/managed-resources?appNamespace=team+a&project=p%2Fq",
            ),
            (
                "https://argocd.example.com/argo-cd/?x=1",
                "https://argocd.example.com/argo-cd/api/v1/applications/db/managed-resources?appNamespace=team+a&project=p%2Fq",
            ),
        ] {
            let api = ArgoCdApi::new(&options(server)).unwrap();
            assert_eq!(
                api.managed_resources_url("team a", "db", "p/q").as_str(),
                expected
            );
        }
    }

    #[test]
    fn only_https_is_accepted() {
        crate::tls::install_crypto_provider();
        for server in [
            "http://argocd.example.com",
            "argocd.example.com",
            "file:///x",
        ] {
            let e = ArgoCdApi::new(&options(server)).unwrap_err();
            assert!(matches!(e, ApiError::BadServer { .. }), "{server}: {e}");
            assert_eq!(e.label(), "config");
        }
    }

    #[test]
    fn argo_cds_error_body_is_quoted_by_its_message() {
        assert_eq!(
            argo_message(r#"{"error":"permission denied","code":7,"message":"permission denied"}"#),
            "permission denied"
        );
        assert_eq!(argo_message("plain"), "plain");
        assert_eq!(argo_message(&"é".repeat(600)).len(), 512);
    }
}
