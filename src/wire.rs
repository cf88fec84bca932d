//! The one way this process builds a `kube::Client` from a `kube::Config`: [`kube_client`].
//!
//! kube 5 builds its connector itself (`HttpConnector::new()`) and never sets `TCP_NODELAY`.
//! Over TLS a request is often written as more than one record (hyper writes the head and the
//! body apart, rustls seals each write), and on a connection whose first segment is not yet
//! acknowledged Nagle's algorithm holds the second until the server's delayed ACK (~40 ms on
//! Linux) releases it. A converge is a chain of small sequential requests, each waiting on the
//! one before, so every stall adds up. Go's net package (kube-apiserver, client-go, Flux) sets
//! `TCP_NODELAY` on every TCP connection; [`kube_client`] does the same and is otherwise kube's
//! own stack, layer for layer (base URI, retry of 429/503/504, auth, extra headers), over
//! kube's rustls config (the `ring` provider, see [`crate::tls`]).
//!
//! The stack also traces the wire at `debug` (target `flux_converger::wire`): one event per
//! request (the Kubernetes verb as the API server's audit log names it, method, path, status,
//! elapsed until the response head) and one per new connection (host, elapsed for TCP connect
//! and TLS handshake). Each event carries the fields of the spans it is sent in (the
//! Kustomization and revision of a service run, the StatefulSet of a converge), so with
//! `--log-level info,flux_converger::wire=debug` a converge's requests can be read and counted
//! one by one, and a second connection or a stalled request shows at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response, Uri};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// A `kube::Client` for `config` whose sockets set `TCP_NODELAY`, tracing each request and
/// each new connection at `debug`.
///
/// Every client of the process is built here (the CLI's and the service's, and through them
/// the tenant and Lease clients, which wrap one). A config with a proxy is handed to kube's
/// own builder unchanged (this build has no proxy feature, so kube refuses it as before).
/// Unlike kube's builder, the client carries no `valid_until`: this process never reads it.
pub fn kube_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut connector = TimeoutConnector::new(TracedConnector {
        inner: connector(&config)?,
    });
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(tower::layer::layer_fn(|inner| TracedRequests { inner }))
        .service(hyper.map_err(BoxError::from));
    Ok(kube::Client::new(service, config.default_namespace))
}

/// The connector under every client [`kube_client`] builds: TCP with `TCP_NODELAY`, then
/// kube's rustls for the config (its roots, client identity, server name) when the URL is
/// https. Public so a test can open a connection with it and look at the socket.
pub fn connector(
    config: &kube::Config,
) -> Result<hyper_rustls::HttpsConnector<HttpConnector>, kube::Error> {
    let mut http = HttpConnector::new();
    // The cluster URL may be https: the TLS layer takes it.
    http.enforce_http(false);
    http.set_nodelay(true);
    config.rustls_https_connector_with_connector(http)
}

/// Logs each request at `debug` when its response head arrives (or it fails).
#[derive(Clone)]
struct TracedRequests<S> {
    inner: S,
}

impl<S, B, RB> tower::Service<Request<B>> for TracedRequests<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().clone();
        let verb = verb(&method, request.uri().path(), request.uri().query());
        let path = request.uri().path_and_query().map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        );
        let sent = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let elapsed_us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
            match &result {
                Ok(response) => tracing::debug!(
                    target: "flux_converger::wire",
                    verb,
                    %method,
                    %path,
                    status = response.status().as_u16(),
                    elapsed_us,
                    "request"
                ),
                Err(error) => tracing::debug!(
                    target: "flux_converger::wire",
                    verb,
                    %method,
                    %path,
                    %error,
                    elapsed_us,
                    "request failed"
                ),
            }
            result
        })
    }
}

/// The Kubernetes verb of a request, as the API server's authorizer and audit log name it:
/// `get`/`list`/`watch` for a GET (a named object, a collection, `watch=true`), `create`,
/// `update`, `patch`, `delete`, `deletecollection`; a path outside `/api` and `/apis`
/// (`/version`, discovery) is a plain `get`. An operator counting a converge's writes reads
/// this field rather than decoding methods and paths.
pub fn verb(method: &http::Method, path: &str, query: Option<&str>) -> &'static str {
    let named = names_an_object(path);
    match *method {
        http::Method::GET | http::Method::HEAD => {
            let watching = query.is_some_and(|q| {
                q.split('&')
                    .any(|pair| pair == "watch=true" || pair == "watch=1")
            });
            if watching {
                "watch"
            } else if named {
                "get"
            } else {
                "list"
            }
        }
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// Whether `path` names one object (or a subresource of one) rather than a collection. The
/// resource path is what follows `/api/v1` or `/apis/<group>/<version>`, less a leading
/// `namespaces/<ns>` of a namespaced resource; a path outside both roots counts as named,
/// so a GET of `/version` is a `get`.
fn names_an_object(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        ["api" | "apis", ..] => return false,
        _ => return true,
    };
    let resource = match rest {
        ["namespaces", _ns, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    resource.len() >= 2
}

/// Logs each new connection (TCP connect and TLS handshake) at `debug`.
#[derive(Clone)]
struct TracedConnector<C> {
    inner: C,
}

impl<C> tower::Service<Uri> for TracedConnector<C>
where
    C: tower::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let host = uri.authority().map(ToString::to_string).unwrap_or_default();
        let started = Instant::now();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let result = connecting.await.map_err(Into::into);
            let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            match &result {
                Ok(_) => tracing::debug!(
                    target: "flux_converger::wire",
                    %host,
                    elapsed_us,
                    "connection opened"
                ),
                Err(error) => tracing::debug!(
                    target: "flux_converger::wire",
                    %host,
                    %error,
                    elapsed_us,
                    "connection failed"
                ),
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_by_table() {
        use http::Method;
        for (method, path, query, expected) in [
            (
                Method::GET,
                "/api/v1/namespaces/default/persistentvolumeclaims",
                Some("labelSelector=a%3Db"),
                "list",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/default/statefulsets/web",
                None,
                "get",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/default/statefulsets",
                Some("fieldSelector=metadata.name%3Dweb&watch=true&resourceVersion=5"),
                "watch",
            ),
            (
                Method::GET,
                "/apis/storage.k8s.io/v1/storageclasses",
                None,
                "list",
            ),
            (
                Method::GET,
                "/apis/storage.k8s.io/v1/storageclasses/standard",
                None,
                "get",
            ),
            (Method::GET, "/api/v1/namespaces", None, "list"),
            (Method::GET, "/api/v1/namespaces/default", None, "get"),
            (
                Method::GET,
                "/apis/apps/v1/statefulsets",
                Some("labelSelector=x"),
                "list",
            ),
            (Method::GET, "/version", None, "get"),
            (Method::GET, "/apis", None, "list"),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/default/statefulsets/web",
                Some("dryRun=All&fieldManager=kustomize-controller"),
                "patch",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/default/persistentvolumeclaims/data-web-0",
                None,
                "patch",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/flux-system/configmaps/x",
                None,
                "update",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/flux-system/secrets",
                None,
                "create",
            ),
            (
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                None,
                "create",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/default/statefulsets/web",
                Some("propagationPolicy=Orphan"),
                "delete",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/default/configmaps",
                Some("labelSelector=x"),
                "deletecollection",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/web-0/log",
                None,
                "get",
            ),
        ] {
            assert_eq!(
                verb(&method, path, query),
                expected,
                "{method} {path}?{query:?}"
            );
        }
    }
}
