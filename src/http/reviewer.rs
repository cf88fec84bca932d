//! The reviews behind `--status-auth=kubernetes` (`http::auth`), asked with the service's own
//! client: a TokenReview (`authentication.k8s.io/v1`) for the caller's bearer token, and a
//! SubjectAccessReview (`authorization.k8s.io/v1`) of `get kustomizations.kustomize.toolkit.fluxcd.io`
//! (or `helmreleases.helm.toolkit.fluxcd.io`, for a HelmRelease's results) for the user, groups, uid and extra that TokenReview found. The service's identity needs
//! `create` on both (manifests/clusterrole.yaml, `access::PERMISSIONS`), as controller-runtime's
//! authenticated metrics do.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::http::auth::{Caller, Resource, ReviewError, Reviewer};

/// Asks the API server, each call bounded by `timeout`.
pub struct KubeReviewer {
    pub client: kube::Client,
    pub timeout: Duration,
}

impl KubeReviewer {
    async fn create<K>(&self, review: &'static str, object: &K) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let failed = |message: String| ReviewError::Failed { review, message };
        tokio::time::timeout(self.timeout, api.create(&PostParams::default(), object))
            .await
            .map_err(|_| failed(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| failed(e.to_string()))
    }
}

impl Reviewer for KubeReviewer {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Caller>, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    // The API server's own audiences, as controller-runtime's filter asks.
                    audiences: None,
                },
                ..Default::default()
            };
            let answer = self.create("TokenReview", &review).await?;
            let Some(status) = answer.status else {
                return Ok(None);
            };
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let Some(user) = status.user.filter(|u| u.username.is_some()) else {
                return Ok(None);
            };
            Ok(Some(Caller {
                username: user.username.unwrap_or_default(),
                uid: user.uid.filter(|uid| !uid.is_empty()),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default().into_iter().collect(),
            }))
        })
    }

    fn may_get<'a>(
        &'a self,
        caller: &'a Caller,
        resource: Resource,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(caller.username.clone()),
                    groups: Some(caller.groups.clone()),
                    uid: caller.uid.clone(),
                    extra: (!caller.extra.is_empty())
                        .then(|| caller.extra.clone().into_iter().collect()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some("get".into()),
                        group: Some(resource.group.into()),
                        resource: Some(resource.resource.into()),
                        namespace: namespace.map(String::from),
                        name: name.map(String::from),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = self.create("SubjectAccessReview", &review).await?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}
