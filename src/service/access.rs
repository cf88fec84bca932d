//! The start-up access check: before an install with too few rights orphan-deletes a
//! StatefulSet it then cannot re-create, `serve` asks the API server whether its own identity
//! may do everything the code sends, and keeps `/readyz` at 503 naming each permission it
//! lacks. The check cannot prove a tenant's rights (those are asked at each converge's
//! pre-flight); it proves the install's.
//!
//! How it asks: one SelfSubjectRulesReview per namespace it needs rights in (`--namespace`,
//! and [`CLUSTER_WIDE`] for the cluster-wide ones), whose RBAC rules are matched here as the
//! RBAC authorizer matches them ([`rules_cover`]); only a permission those rules do not show
//! is asked on its own with a SelfSubjectAccessReview, since a rules review lists RBAC's rules
//! alone (`system:masters`, a webhook or another authorizer may still allow it). A correct
//! install is so checked with two requests instead of one review per permission (some fifty).
//! The rules are kept for the check's second pass (once the Kustomizations are known, one
//! naming a service account needs `impersonate`); a permission found missing is asked again,
//! rules and all, every minute.
//!
//! [`PERMISSIONS`] is the one list of what the service sends under its own identity.
//! `tests/it/rbac.rs` holds it against the shipped roles and against the request log of every
//! flow the service runs, so it is neither shorter nor wider than the code.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, ResourceRule, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::service::index::Index;
use crate::service::watch::Readiness;

/// Where a permission is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// In every namespace (or a cluster-scoped resource): a ClusterRole bound cluster-wide.
    Cluster,
    /// In the service's own namespace (`--namespace`): its records and its Lease.
    Own,
}

/// When the code sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum When {
    Always,
    /// With `--leader-elect`.
    LeaderElect,
    /// With `--default-service-account`, or once a handled Kustomization names a
    /// `spec.serviceAccountName`.
    Impersonating,
    /// With `--status-auth=kubernetes` (`http::auth`).
    StatusAuth,
    /// Once a HelmRelease opts in: its release records, with the opt-in component
    /// `manifests/helm-release-reader` (not asked at start: an install without it gates
    /// Kustomizations only, and a HelmRelease's run names the missing right).
    HelmReleases,
    /// With `--argocd-server` (the Argo CD lane), granted by the opt-in component
    /// `manifests/argocd`.
    ArgoCd,
}

/// One verb on one resource the service sends under its own identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    pub verb: &'static str,
    /// `""` is the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub scope: Scope,
    pub when: When,
}

const fn p(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    scope: Scope,
    when: When,
) -> Permission {
    Permission {
        verb,
        group,
        resource,
        scope,
        when,
    }
}

use Scope::{Cluster, Own};
use When::{Always, ArgoCd, HelmReleases, Impersonating, LeaderElect, StatusAuth};

const APPS: &str = "apps";
const FLUX_KS: &str = "kustomize.toolkit.fluxcd.io";
const FLUX_HELM: &str = "helm.toolkit.fluxcd.io";
const FLUX_SOURCE: &str = "source.toolkit.fluxcd.io";
const ARGOCD: &str = "argoproj.io";

/// Everything the service sends as itself (manifests/clusterrole.yaml and role.yaml grant
/// exactly these, plus `create` on `selfsubjectrulesreviews` and `selfsubjectaccessreviews`
/// for this check).
pub const PERMISSIONS: &[Permission] = &[
    // Decide, prove, orphan-delete and wait, re-apply (a server-side apply that re-creates the
    // orphan-deleted object is authorised as `create`); `list` + `watch` also feed the watch of
    // Flux's StatefulSets (`cluster::WatchedStatefulSets`).
    p("get", APPS, "statefulsets", Cluster, Always),
    p("list", APPS, "statefulsets", Cluster, Always),
    p("watch", APPS, "statefulsets", Cluster, Always),
    p("patch", APPS, "statefulsets", Cluster, Always),
    p("create", APPS, "statefulsets", Cluster, Always),
    p("delete", APPS, "statefulsets", Cluster, Always),
    // Every claim of a StatefulSet, and growing the smaller ones; then following the claims
    // grown, and the resizer's Events about them, until they have grown.
    p("list", "", "persistentvolumeclaims", Cluster, Always),
    p("watch", "", "persistentvolumeclaims", Cluster, Always),
    p("patch", "", "persistentvolumeclaims", Cluster, Always),
    p("list", "", "events", Cluster, Always),
    p("watch", "", "events", Cluster, Always),
    // allowVolumeExpansion, from a cache.
    p("list", "storage.k8s.io", "storageclasses", Cluster, Always),
    p("watch", "storage.k8s.io", "storageclasses", Cluster, Always),
    // The VolumeAttributesClass a template moves to must exist (read when a class moves).
    p(
        "get",
        "storage.k8s.io",
        "volumeattributesclasses",
        Cluster,
        Always,
    ),
    // `restart-for-resize` (opt-in per StatefulSet): its pods watched, evicted one at a time.
    p("list", "", "pods", Cluster, Always),
    p("watch", "", "pods", Cluster, Always),
    p("create", "", "pods/eviction", Cluster, Always),
    // postBuild.substituteFrom.
    p("get", "", "configmaps", Cluster, Always),
    p("get", "", "secrets", Cluster, Always),
    // The gated Kustomizations, and the hand-off.
    p("get", FLUX_KS, "kustomizations", Cluster, Always),
    p("list", FLUX_KS, "kustomizations", Cluster, Always),
    p("watch", FLUX_KS, "kustomizations", Cluster, Always),
    p("patch", FLUX_KS, "kustomizations", Cluster, Always),
    // The HelmReleases that opt in (watched), and their hand-back.
    p("get", FLUX_HELM, "helmreleases", Cluster, Always),
    p("list", FLUX_HELM, "helmreleases", Cluster, Always),
    p("watch", FLUX_HELM, "helmreleases", Cluster, Always),
    p("patch", FLUX_HELM, "helmreleases", Cluster, Always),
    // The revision each Kustomization is about to apply.
    p("get", FLUX_SOURCE, "gitrepositories", Cluster, Always),
    p("list", FLUX_SOURCE, "gitrepositories", Cluster, Always),
    p("watch", FLUX_SOURCE, "gitrepositories", Cluster, Always),
    p("get", FLUX_SOURCE, "ocirepositories", Cluster, Always),
    p("list", FLUX_SOURCE, "ocirepositories", Cluster, Always),
    p("watch", FLUX_SOURCE, "ocirepositories", Cluster, Always),
    p("get", FLUX_SOURCE, "buckets", Cluster, Always),
    p("list", FLUX_SOURCE, "buckets", Cluster, Always),
    p("watch", FLUX_SOURCE, "buckets", Cluster, Always),
    p("get", FLUX_SOURCE, "externalartifacts", Cluster, Always),
    p("list", FLUX_SOURCE, "externalartifacts", Cluster, Always),
    p("watch", FLUX_SOURCE, "externalartifacts", Cluster, Always),
    // The `artifact` gate publishes a converged revision into an ExternalArtifact's status.
    p(
        "patch",
        FLUX_SOURCE,
        "externalartifacts/status",
        Cluster,
        Always,
    ),
    // Kubernetes Events on the Kustomizations (a new event, then its series).
    p("create", "events.k8s.io", "events", Cluster, Always),
    p("patch", "events.k8s.io", "events", Cluster, Always),
    // The intents journal and the results, in its own namespace.
    p("get", "", "configmaps", Own, Always),
    p("list", "", "configmaps", Own, Always),
    // The results are followed with a watch on every replica.
    p("watch", "", "configmaps", Own, Always),
    p("create", "", "configmaps", Own, Always),
    p("update", "", "configmaps", Own, Always),
    // Results are replaced (update), intents were applied (patch) before they became
    // Secrets; a legacy intent ConfigMap is deleted once moved.
    p("delete", "", "configmaps", Own, Always),
    // The intents, as Secrets (they may hold values substituted from Secrets): applied
    // (patch), created when a legacy ConfigMap is moved, watched by every replica.
    p("get", "", "secrets", Own, Always),
    p("list", "", "secrets", Own, Always),
    p("watch", "", "secrets", Own, Always),
    p("create", "", "secrets", Own, Always),
    p("patch", "", "secrets", Own, Always),
    p("delete", "", "secrets", Own, Always),
    // The Lease.
    p("get", "coordination.k8s.io", "leases", Own, LeaderElect),
    p("create", "coordination.k8s.io", "leases", Own, LeaderElect),
    p("patch", "coordination.k8s.io", "leases", Own, LeaderElect),
    // An opted-in HelmRelease's release records, in its storage namespace.
    p("list", "", "secrets", Cluster, HelmReleases),
    // Argo CD's Applications (watched in --argocd-namespaces; read by each run), the refresh
    // annotation (patch) and the hand-back's sync operation (an update carrying the
    // resourceVersion read, as Argo CD's own API writes it); their AppProjects (watched: a
    // changed one runs its Applications again; read by each converge). `argocd-cm` is read
    // with the cluster-wide `get configmaps` above (postBuild.substituteFrom's).
    p("get", ARGOCD, "applications", Cluster, ArgoCd),
    p("list", ARGOCD, "applications", Cluster, ArgoCd),
    p("watch", ARGOCD, "applications", Cluster, ArgoCd),
    p("update", ARGOCD, "applications", Cluster, ArgoCd),
    p("patch", ARGOCD, "applications", Cluster, ArgoCd),
    p("get", ARGOCD, "appprojects", Cluster, ArgoCd),
    p("list", ARGOCD, "appprojects", Cluster, ArgoCd),
    p("watch", ARGOCD, "appprojects", Cluster, ArgoCd),
    // A Kustomization's service account, as kustomize-controller acts as it.
    p("impersonate", "", "serviceaccounts", Cluster, Impersonating),
    // `--status-auth=kubernetes`: who holds a bearer token, and whether they may get a
    // Kustomization (controller-runtime's authenticated metrics ask the same two).
    p(
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        Cluster,
        StatusAuth,
    ),
    p(
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        Cluster,
        StatusAuth,
    ),
];

/// What decides which permissions apply.
#[derive(Clone, Debug)]
pub struct Needs {
    /// `--namespace`: where [`Scope::Own`] permissions are asked.
    pub namespace: String,
    pub leader_elect: bool,
    pub impersonating: bool,
    /// `--status-auth=kubernetes`.
    pub status_auth: bool,
    /// The opt-in component for HelmReleases is installed (never assumed at start).
    pub helm_releases: bool,
    /// The Argo CD lane runs (`--argocd-server`): its component must be installed.
    pub argocd: bool,
}

/// A permission asked in one namespace (`None`: cluster-wide).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Asked {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
}

impl fmt::Display for Asked {
    /// `create statefulsets.apps cluster-wide`, `get configmaps in flux-system`: what
    /// `kubectl auth can-i` takes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

/// The permissions that apply, in table order.
pub fn needed(needs: &Needs) -> Vec<Asked> {
    PERMISSIONS
        .iter()
        .filter(|p| match p.when {
            Always => true,
            LeaderElect => needs.leader_elect,
            Impersonating => needs.impersonating,
            StatusAuth => needs.status_auth,
            HelmReleases => needs.helm_releases,
            ArgoCd => needs.argocd,
        })
        .map(|p| Asked {
            verb: p.verb,
            group: p.group,
            resource: p.resource,
            namespace: match p.scope {
                Cluster => None,
                Own => Some(needs.namespace.clone()),
            },
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("SelfSubjectAccessReview for {asked}: {source}")]
    Review {
        asked: String,
        #[source]
        source: kube::Error,
    },
    #[error("SelfSubjectAccessReview for {asked}: no answer within {timeout:?}")]
    Timeout { asked: String, timeout: Duration },
    #[error("SelfSubjectRulesReview in {namespace}: {source}")]
    Rules {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("SelfSubjectRulesReview in {namespace}: no answer within {timeout:?}")]
    RulesTimeout {
        namespace: String,
        timeout: Duration,
    },
}

/// The namespace a rules review is asked in to learn the cluster-wide grants: no namespace can
/// have this name (a dot is not allowed in one), so no RoleBinding lives there and the rules
/// answered are the ClusterRoleBindings' alone, which is what "cluster-wide" means (a
/// SelfSubjectAccessReview without a namespace counts the same bindings). A rules review
/// needs a namespace: the real server answers 400 `no namespace on request` without one.
pub const CLUSTER_WIDE: &str = "flux-converger.cluster-wide";

/// The namespace whose rules review answers for `asked`.
fn rules_namespace(asked: &Asked) -> &str {
    asked.namespace.as_deref().unwrap_or(CLUSTER_WIDE)
}

/// Whether RBAC rules allow `asked` (no object name), matched as the RBAC authorizer matches
/// a rule (`rbac.RuleAllows`): the verb or `*`; the group or `*`; the resource, `*`, or
/// `resource/subresource` exactly, or `*/subresource`; and a rule naming objects
/// (`resourceNames`) never covers a request that names none. Pure, so table-tested.
pub fn rules_cover(rules: &[ResourceRule], asked: &Asked) -> bool {
    let subresource = asked.resource.split_once('/').map(|(_, s)| s);
    rules.iter().any(|rule| {
        let has = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        let resource_ok = resources.iter().any(|r| {
            r == "*"
                || r == asked.resource
                || subresource.is_some_and(|sub| r.strip_prefix("*/") == Some(sub))
        });
        has(&rule.verbs, asked.verb)
            && has(groups, asked.group)
            && resource_ok
            && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
    })
}

/// The RBAC rules of this process's identity in `namespace` (one SelfSubjectRulesReview).
pub async fn rules(
    client: &kube::Client,
    namespace: &str,
    timeout: Duration,
) -> Result<Vec<ResourceRule>, AccessError> {
    let request = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_string()),
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let answer = tokio::time::timeout(timeout, api.create(&PostParams::default(), &request))
        .await
        .map_err(|_| AccessError::RulesTimeout {
            namespace: namespace.to_string(),
            timeout,
        })?
        .map_err(|source| AccessError::Rules {
            namespace: namespace.to_string(),
            source,
        })?;
    let status = answer.status.unwrap_or_default();
    if let Some(error) = status.evaluation_error.filter(|e| !e.is_empty()) {
        // Some bindings could not be read (a role they name is missing): the rules answered
        // are still granted; what they lack is asked one by one.
        tracing::debug!(namespace, %error, "the rules review could not evaluate every binding");
    }
    Ok(status.resource_rules)
}

/// [`rules`] until it answers (a failed call says nothing about the permissions).
async fn rules_until_answered(
    client: &kube::Client,
    namespace: &str,
    timeout: Duration,
) -> Vec<ResourceRule> {
    let mut wait = Duration::from_millis(200);
    loop {
        match rules(client, namespace, timeout).await {
            Ok(rules) => return rules,
            Err(error) => {
                tracing::warn!(%error, "checking the service's access; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Asks the API server whether this process's identity may do `asked`.
pub async fn review(
    client: &kube::Client,
    asked: &Asked,
    timeout: Duration,
) -> Result<bool, AccessError> {
    let request = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(asked.verb.to_string()),
                group: Some(asked.group.to_string()),
                // `resource/subresource` is asked as the API server authorises it: the
                // resource and its subresource apart.
                resource: Some(
                    asked
                        .resource
                        .split_once('/')
                        .map_or(asked.resource, |(r, _)| r)
                        .to_string(),
                ),
                subresource: asked.resource.split_once('/').map(|(_, s)| s.to_string()),
                namespace: asked.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = tokio::time::timeout(timeout, api.create(&PostParams::default(), &request))
        .await
        .map_err(|_| AccessError::Timeout {
            asked: asked.to_string(),
            timeout,
        })?
        .map_err(|source| AccessError::Review {
            asked: asked.to_string(),
            source,
        })?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// [`review`] until it answers: a failed call says nothing about the permission, so it is
/// retried with backoff, never counted as missing.
pub async fn review_until_answered(
    client: &kube::Client,
    asked: &Asked,
    timeout: Duration,
) -> bool {
    let mut wait = Duration::from_millis(200);
    loop {
        match review(client, asked, timeout).await {
            Ok(allowed) => return allowed,
            Err(error) => {
                tracing::warn!(%error, "checking the service's access; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// How often permissions found missing are asked again, so a fixed install becomes ready
/// without a restart.
const RECHECK: Duration = Duration::from_secs(60);
/// Access reviews in flight at once (one per permission the rules reviews do not show).
const CONCURRENT_REVIEWS: usize = 8;

/// The check as `serve` runs it, for as long as it matters: asks every permission that
/// applies (rules reviews first, see the module's comment), logs one ERROR per missing one and keeps `/readyz` at 503 naming them, re-asks the
/// missing ones every [`RECHECK`]; once the watches have synced it asks again with the
/// Kustomizations known (one naming a service account needs `impersonate`), then ends.
pub async fn check(
    client: kube::Client,
    base: Needs,
    index: Arc<RwLock<Index>>,
    readiness: Readiness,
    timeout: Duration,
) {
    let mut granted: BTreeSet<Asked> = BTreeSet::new();
    let mut reported: BTreeSet<Asked> = BTreeSet::new();
    // The rules reviews' answers, by namespace: kept while every permission asked is granted
    // (the second pass asks only what the Kustomizations added), asked again after a miss.
    let mut known_rules: std::collections::HashMap<String, Vec<ResourceRule>> =
        std::collections::HashMap::new();
    loop {
        let synced = readiness.synced();
        let impersonating = base.impersonating
            || index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .impersonating();
        let needs = Needs {
            impersonating,
            ..base.clone()
        };
        let to_ask: Vec<Asked> = needed(&needs)
            .into_iter()
            .filter(|a| !granted.contains(a))
            .collect();
        // One rules review per namespace asked about (kept for the next pass), then an access
        // review for each permission the rules do not show.
        let namespaces: BTreeSet<&str> = to_ask.iter().map(rules_namespace).collect();
        for namespace in namespaces {
            if !known_rules.contains_key(namespace) {
                let rules = rules_until_answered(&client, namespace, timeout).await;
                known_rules.insert(namespace.to_string(), rules);
            }
        }
        let (shown, unshown): (Vec<Asked>, Vec<Asked>) = to_ask.into_iter().partition(|asked| {
            known_rules
                .get(rules_namespace(asked))
                .is_some_and(|rules| rules_cover(rules, asked))
        });
        let confirmed: Vec<(Asked, bool)> = futures::stream::iter(unshown)
            .map(|asked| {
                let client = client.clone();
                async move {
                    let allowed = review_until_answered(&client, &asked, timeout).await;
                    (asked, allowed)
                }
            })
            .buffered(CONCURRENT_REVIEWS)
            .collect()
            .await;
        let answers = shown
            .into_iter()
            .map(|asked| (asked, true))
            .chain(confirmed);
        let mut missing = Vec::new();
        for (asked, allowed) in answers {
            let namespace = asked.namespace.as_deref().unwrap_or("*");
            if allowed {
                if reported.remove(&asked) {
                    tracing::info!(
                        verb = asked.verb,
                        resource = asked.resource,
                        group = asked.group,
                        namespace,
                        "permission granted now"
                    );
                }
                granted.insert(asked);
            } else {
                if reported.insert(asked.clone()) {
                    tracing::error!(
                        verb = asked.verb,
                        resource = asked.resource,
                        group = asked.group,
                        namespace,
                        "missing permission: the service account cannot {asked}; grant it in the install's ClusterRole/Role (manifests/)"
                    );
                }
                missing.push(asked.to_string());
            }
        }
        let complete = missing.is_empty();
        readiness.set_missing_access(missing, synced);
        if !complete {
            tokio::time::sleep(RECHECK).await;
            // A fixed install shows in fresh rules.
            known_rules.clear();
        } else if synced {
            tracing::info!(
                permissions = granted.len(),
                "access checked: every permission granted"
            );
            return;
        } else {
            readiness.wait_synced(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(leader_elect: bool, impersonating: bool) -> Needs {
        Needs {
            namespace: "flux-system".into(),
            leader_elect,
            impersonating,
            status_auth: false,
            helm_releases: false,
            argocd: false,
        }
    }

    #[test]
    fn status_auth_asks_for_the_two_reviews() {
        let reviews = |status_auth: bool| {
            let n = Needs {
                status_auth,
                ..needs(false, false)
            };
            needed(&n)
                .iter()
                .filter(|a| a.resource.ends_with("reviews"))
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert!(reviews(false).is_empty());
        assert_eq!(
            reviews(true),
            [
                "create tokenreviews.authentication.k8s.io cluster-wide",
                "create subjectaccessreviews.authorization.k8s.io cluster-wide"
            ]
        );
    }

    #[test]
    fn what_is_asked_follows_the_flags() {
        let count =
            |n: &Needs, resource: &str| needed(n).iter().filter(|a| a.resource == resource).count();
        let cases = [
            (needs(false, false), 0, 0),
            (needs(true, false), 3, 0),
            (needs(false, true), 0, 1),
            (needs(true, true), 3, 1),
        ];
        for (n, leases, impersonate) in cases {
            assert_eq!(count(&n, "leases"), leases, "{n:?}");
            assert_eq!(count(&n, "serviceaccounts"), impersonate, "{n:?}");
            assert_eq!(count(&n, "statefulsets"), 6, "{n:?}");
        }
    }

    #[test]
    fn the_argocd_lane_asks_for_applications_and_appprojects() {
        let asked = |argocd: bool| -> Vec<String> {
            needed(&Needs {
                argocd,
                ..needs(false, false)
            })
            .iter()
            .filter(|a| a.group == ARGOCD)
            .map(ToString::to_string)
            .collect()
        };
        assert!(asked(false).is_empty());
        let with = asked(true);
        for want in [
            "update applications.argoproj.io cluster-wide",
            "patch applications.argoproj.io cluster-wide",
            "watch appprojects.argoproj.io cluster-wide",
        ] {
            assert!(with.iter().any(|t| t == want), "{want} not in {with:?}");
        }
        assert_eq!(with.len(), 8);
    }

    #[test]
    fn a_permission_reads_as_kubectl_auth_can_i_takes_it() {
        let asked = needed(&needs(true, true));
        let text: Vec<String> = asked.iter().map(ToString::to_string).collect();
        for want in [
            "create statefulsets.apps cluster-wide",
            "patch persistentvolumeclaims cluster-wide",
            "delete configmaps in flux-system",
            "watch configmaps in flux-system",
            "create leases.coordination.k8s.io in flux-system",
            "impersonate serviceaccounts cluster-wide",
        ] {
            assert!(text.iter().any(|t| t == want), "{want} not in {text:?}");
        }
    }

    #[test]
    fn rules_cover_as_the_rbac_authorizer_matches_by_table() {
        let rule = |verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]| {
            let list = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            ResourceRule {
                verbs: verbs.iter().map(|s| s.to_string()).collect(),
                api_groups: list(groups),
                resources: list(resources),
                resource_names: (!names.is_empty()).then(|| list(names)).flatten(),
            }
        };
        let asked = |verb: &'static str, group: &'static str, resource: &'static str| Asked {
            verb,
            group,
            resource,
            namespace: None,
        };
        let sts = asked("create", "apps", "statefulsets");
        let status = asked(
            "patch",
            "source.toolkit.fluxcd.io",
            "externalartifacts/status",
        );
        let cm = asked("get", "", "configmaps");
        // (rules, asked, covered)
        let table = [
            (
                vec![rule(&["create"], &["apps"], &["statefulsets"], &[])],
                &sts,
                true,
            ),
            (vec![rule(&["*"], &["*"], &["*"], &[])], &sts, true),
            (
                vec![rule(&["get", "patch"], &["apps"], &["statefulsets"], &[])],
                &sts,
                false,
            ),
            (
                vec![rule(&["create"], &[""], &["statefulsets"], &[])],
                &sts,
                false,
            ),
            (
                vec![rule(&["create"], &["apps"], &["deployments"], &[])],
                &sts,
                false,
            ),
            // A rule naming objects never covers a request naming none.
            (
                vec![rule(&["create"], &["apps"], &["statefulsets"], &["web"])],
                &sts,
                false,
            ),
            // Two rules, the second covers.
            (
                vec![
                    rule(&["get"], &["apps"], &["statefulsets"], &[]),
                    rule(&["create"], &["apps"], &["statefulsets"], &[]),
                ],
                &sts,
                true,
            ),
            // Subresources: exactly, or `*/sub`; the resource alone does not.
            (
                vec![rule(
                    &["patch"],
                    &["source.toolkit.fluxcd.io"],
                    &["externalartifacts/status"],
                    &[],
                )],
                &status,
                true,
            ),
            (
                vec![rule(
                    &["patch"],
                    &["source.toolkit.fluxcd.io"],
                    &["*/status"],
                    &[],
                )],
                &status,
                true,
            ),
            (
                vec![rule(
                    &["patch"],
                    &["source.toolkit.fluxcd.io"],
                    &["externalartifacts"],
                    &[],
                )],
                &status,
                false,
            ),
            (
                vec![rule(
                    &["patch"],
                    &["source.toolkit.fluxcd.io"],
                    &["*/scale"],
                    &[],
                )],
                &status,
                false,
            ),
            // The core group is the empty string.
            (
                vec![rule(&["get"], &[""], &["configmaps", "secrets"], &[])],
                &cm,
                true,
            ),
            (vec![], &cm, false),
        ];
        for (rules, asked, covered) in table {
            assert_eq!(
                rules_cover(&rules, asked),
                covered,
                "{asked} under {rules:?}"
            );
        }
        // Cluster-wide permissions are asked where no RoleBinding can be.
        assert_eq!(rules_namespace(&sts), CLUSTER_WIDE);
        let own = Asked {
            namespace: Some("flux-system".into()),
            ..cm.clone()
        };
        assert_eq!(rules_namespace(&own), "flux-system");
    }

    #[test]
    fn the_table_has_no_duplicates() {
        let mut all = PERMISSIONS.to_vec();
        all.sort();
        all.dedup_by(|a, b| {
            (a.verb, a.group, a.resource, a.scope) == (b.verb, b.group, b.resource, b.scope)
        });
        assert_eq!(all.len(), PERMISSIONS.len());
    }
}
