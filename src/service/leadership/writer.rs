//! The service's one writer: its API client, fenced by the Lease. Every request that would
//! change the cluster (converge steps under a tenant, hand-offs, publishes, results, intents,
//! the observer's re-suspends, Events) goes through [`fenced`], which asks the [`Tenure`]
//! right before sending it and refuses it, without sending anything, once this replica
//! cannot prove it holds the Lease. Tenant clients are built on top of it
//! (`cluster::tenant::impersonating`), so they are fenced too.
//!
//! Not fenced, because they change nothing another replica owns: reads (`GET`, `HEAD`,
//! watches), server-side dry runs (`dryRun=All` persists nothing), the API server's reviews
//! (`authentication.k8s.io`, `authorization.k8s.io`: `/status` auth and access self-checks
//! create nothing), and the Lease itself (`coordination.k8s.io`: the Lease manager must
//! renew or take it while not proven).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use kube::client::Body;

use crate::service::leadership::tenure::Tenure;

/// A write refused by the fence: nothing was sent.
#[derive(Debug, thiserror::Error)]
#[error("not written ({method} {path}): {reason}")]
pub struct Fenced {
    pub method: Method,
    pub path: String,
    pub reason: crate::converge::fence::Fenced,
}

/// `client`, refusing every cluster-changing request while `tenure` says no.
pub fn fenced(client: kube::Client, tenure: Tenure) -> kube::Client {
    let default_namespace = client.default_namespace().to_string();
    kube::Client::new(Writer { client, tenure }, default_namespace)
}

/// Whether a request changes what another replica owns (see the module docs).
pub fn is_fenced_write(method: &Method, path: &str, query: Option<&str>) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let dry_run = query.is_some_and(|q| q.split('&').any(|kv| kv == "dryRun=All"));
    let unowned = [
        "/apis/authentication.k8s.io/",
        "/apis/authorization.k8s.io/",
        "/apis/coordination.k8s.io/",
    ]
    .iter()
    .any(|group| path.starts_with(group));
    !dry_run && !unowned
}

#[derive(Clone)]
struct Writer {
    client: kube::Client,
    tenure: Tenure,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower::Service<Request<Body>> for Writer {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let uri = request.uri();
        let refused = if is_fenced_write(request.method(), uri.path(), uri.query()) {
            self.tenure.check().err()
        } else {
            None
        };
        if let Some(reason) = refused {
            let fenced = Fenced {
                method: request.method().clone(),
                path: uri.path().to_string(),
                reason,
            };
            tracing::warn!(error = %fenced, "write refused by the Lease fence");
            return Box::pin(async move { Err(kube::Error::Service(Box::new(fenced))) });
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_fence_holds_back_by_table() {
        let ns = "/api/v1/namespaces/ns";
        for (method, path, query, fenced) in [
            (
                Method::GET,
                "/apis/apps/v1/namespaces/ns/statefulsets",
                None,
                false,
            ),
            (
                Method::GET,
                "/apis/apps/v1/statefulsets",
                Some("watch=true"),
                false,
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/ns/statefulsets/web",
                Some("fieldManager=kustomize-controller&force=true"),
                true,
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/ns/statefulsets/web",
                Some("dryRun=All&fieldManager=kustomize-controller"),
                false,
            ),
            (
                Method::POST,
                "/apis/apps/v1/namespaces/ns/statefulsets",
                Some("dryRun=All"),
                false,
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/ns/statefulsets/web",
                None,
                true,
            ),
            (
                Method::PATCH,
                &format!("{ns}/persistentvolumeclaims/data-web-0"),
                None,
                true,
            ),
            (Method::POST, &format!("{ns}/events"), None, true),
            (Method::PUT, &format!("{ns}/configmaps/results"), None, true),
            (
                Method::PATCH,
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/ns/kustomizations/app",
                None,
                true,
            ),
            (
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                None,
                false,
            ),
            (
                Method::POST,
                "/apis/authentication.k8s.io/v1/tokenreviews",
                None,
                false,
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/flux-converger",
                None,
                false,
            ),
            // Only the exact flag: a value that merely contains it is no dry run.
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/ns/statefulsets/web",
                Some("x=dryRun=All"),
                true,
            ),
        ] {
            assert_eq!(
                is_fenced_write(&method, path, query),
                fenced,
                "{method} {path}?{query:?}"
            );
        }
    }
}
