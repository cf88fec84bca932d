//! The AppProject (`argoproj.io/v1alpha1`) fields the converger reads: where an Application's
//! objects may go (`destinations`, the namespaced resource lists) and as whom Argo CD applies
//! them (`destinationServiceAccounts`, when impersonation is on in `argocd-cm`).
//!
//! The rules are Argo CD 3.6's (`AppProject.IsDestinationPermitted`, `IsGroupKindNamePermitted`,
//! `settings.DeriveServiceAccountToImpersonate`): a StatefulSet the project would not let Argo CD
//! sync is not converged either, and the converge acts as the identity Argo CD would apply with.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::application::{Application, IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use crate::gated::service_account_user;

/// The `argocd-cm` key turning impersonation on (`"true"`, nothing else).
pub const IMPERSONATION_ENABLED: &str = "application.sync.impersonation.enabled";
/// The `argocd-cm` key saying whether a missing match fails the sync (anything but `"false"`;
/// default true).
pub const IMPERSONATION_ENFORCED: &str = "application.sync.impersonation.enforced";

/// An AppProject, as read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct AppProject {
    pub metadata: ObjectMeta,
    pub spec: AppProjectSpec,
}

/// `spec`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct AppProjectSpec {
    pub destinations: Vec<ProjectDestination>,
    /// `None` (absent) allows every namespaced kind; an empty list allows none (Argo CD tells
    /// the two apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_resource_whitelist: Option<Vec<GroupKind>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespace_resource_blacklist: Vec<GroupKind>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub permit_only_project_scoped_clusters: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub destination_service_accounts: Vec<DestinationServiceAccount>,
}

/// One `spec.destinations[]` item: globs, `!` for a deny pattern.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProjectDestination {
    pub server: String,
    pub name: String,
    pub namespace: String,
}

/// A `metav1.GroupKind` (globs in the project's lists).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

/// One `spec.destinationServiceAccounts[]` item.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct DestinationServiceAccount {
    pub server: String,
    pub namespace: String,
    /// `sa` (in the Application's destination namespace) or `namespace:sa`.
    pub default_service_account: String,
}

impl kube::Resource for AppProject {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "AppProject".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        super::application::GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        super::application::VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        super::application::API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "appprojects".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A pattern that does not compile (Argo CD then matches nothing, or fails the sync).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob pattern {pattern:?}: {message}")]
pub struct BadPattern {
    pub pattern: String,
    pub message: String,
}

/// Argo CD's `glob.Match` without separators: the whole `text` against `pattern` (`*`, `?`,
/// `[...]`, `[!...]`, `{a,b}`, `\` escapes).
fn glob(pattern: &str, text: &str) -> Result<bool, BadPattern> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher().is_match(text))
        .map_err(|e| BadPattern {
            pattern: pattern.to_owned(),
            message: e.kind().to_string(),
        })
}

/// `globMatch(pattern, val, allowNegation=true)`: `*` matches all, `!p` is "not p", a pattern
/// that does not compile matches nothing.
fn glob_match(pattern: &str, text: &str) -> bool {
    if let Some(rest) = pattern.strip_prefix('!') {
        return !glob(rest, text).unwrap_or(false);
    }
    pattern == "*" || glob(pattern, text).unwrap_or(false)
}

fn deny(pattern: &str) -> bool {
    pattern.starts_with('!')
}

/// Why a StatefulSet may not be converged under this project.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotPermitted {
    /// Argo CD's own words (`validateSyncPermissions`).
    #[error("namespace {namespace} is not permitted in project '{project}'")]
    Namespace { namespace: String, project: String },
    #[error("resource apps:StatefulSet is not permitted in project {project}")]
    Kind { project: String },
    /// Project-scoped clusters need the cluster Secrets, which the converger does not read.
    #[error(
        "project '{project}' permits only project-scoped clusters (permitOnlyProjectScopedClusters): the converger does not read cluster Secrets to check the in-cluster one"
    )]
    ProjectScopedClusters { project: String },
}

impl AppProject {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `isDestinationMatched` for the in-cluster cluster (server and name) and `namespace`.
    pub fn in_cluster_namespace_permitted(&self, namespace: &str) -> bool {
        let mut any = false;
        for item in &self.spec.destinations {
            let name = glob_match(&item.name, IN_CLUSTER_NAME);
            let server = glob_match(&item.server, IN_CLUSTER_SERVER);
            let ns = glob_match(&item.namespace, namespace);
            if (server || name) && ns {
                any = true;
            } else if (!name && deny(&item.name)) || (!server && deny(&item.server)) && ns {
                // Go's `a || b && c` is `a || (b && c)`, as written here.
                return false;
            } else if !ns && deny(&item.namespace) && server {
                return false;
            }
        }
        any
    }

    /// `IsGroupKindNamePermitted` for a namespaced `apps/StatefulSet`.
    pub fn statefulset_kind_permitted(&self) -> bool {
        let listed = |list: &[GroupKind]| {
            list.iter().any(|gk| {
                glob(&gk.kind, "StatefulSet").unwrap_or(false)
                    && glob(&gk.group, "apps").unwrap_or(false)
            })
        };
        let white = match &self.spec.namespace_resource_whitelist {
            None => true,
            Some(list) => !list.is_empty() && listed(list),
        };
        white && !listed(&self.spec.namespace_resource_blacklist)
    }

    /// Whether Argo CD would sync a StatefulSet in `namespace` of the in-cluster cluster under
    /// this project (`validateSyncPermissions`).
    pub fn permits_statefulset(&self, namespace: &str) -> Result<(), NotPermitted> {
        let project = self.name().to_owned();
        if !self.statefulset_kind_permitted() {
            return Err(NotPermitted::Kind { project });
        }
        if !self.in_cluster_namespace_permitted(namespace) {
            return Err(NotPermitted::Namespace {
                namespace: namespace.to_owned(),
                project,
            });
        }
        if self.spec.permit_only_project_scoped_clusters {
            return Err(NotPermitted::ProjectScopedClusters { project });
        }
        Ok(())
    }
}

/// What `argocd-cm` says about impersonation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Impersonation {
    pub enabled: bool,
    pub enforced: bool,
}

impl Impersonation {
    /// From `argocd-cm`'s `data` (`None`: no ConfigMap, impersonation off).
    pub fn from_argocd_cm(data: Option<&BTreeMap<String, String>>) -> Self {
        let get = |key: &str| data.and_then(|d| d.get(key)).map(String::as_str);
        Impersonation {
            enabled: get(IMPERSONATION_ENABLED) == Some("true"),
            enforced: get(IMPERSONATION_ENFORCED) != Some("false"),
        }
    }
}

/// The identity a converge of the Application acts as, and where it came from (said in the
/// record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The AppProject's `destinationServiceAccounts` match (impersonation on).
    Project { user: String },
    /// `--default-service-account`, in the destination namespace (else the Application's).
    DefaultServiceAccount { user: String },
    /// The service's own.
    Own,
}

impl Identity {
    /// The user to impersonate, `None` for the service's own.
    pub fn user(&self) -> Option<&str> {
        match self {
            Identity::Project { user } | Identity::DefaultServiceAccount { user } => Some(user),
            Identity::Own => None,
        }
    }

    /// Where the identity comes from, as the record says it.
    pub fn source(&self) -> &'static str {
        match self {
            Identity::Project { .. } => "AppProject destinationServiceAccounts",
            Identity::DefaultServiceAccount { .. } => "--default-service-account",
            Identity::Own => "the service's own",
        }
    }
}

/// Why no identity can be chosen: Argo CD would not sync either.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Argo CD's words when impersonation is enforced and no entry matches.
    #[error(
        "no matching service account found for destination server {server} and namespace {namespace}"
    )]
    NoMatch { server: String, namespace: String },
    #[error("default service account contains invalid chars '{0}'")]
    InvalidServiceAccount(String),
    #[error("{0}")]
    Pattern(#[from] BadPattern),
}

/// The characters Argo CD refuses in a `defaultServiceAccount`.
const DISALLOWED: &[char] = &['!', '*', '[', ']', '{', '}', '\\', '/'];

/// The identity Argo CD would sync `app` (an in-cluster Application of `project`) with:
/// the first `destinationServiceAccounts` entry whose `server` and `namespace` globs match,
/// when impersonation is enabled; else `--default-service-account`; else the service's own.
/// With impersonation enforced and no match, Argo CD fails the sync: so does this.
pub fn identity(
    project: &AppProject,
    app: &Application,
    impersonation: Impersonation,
    default_service_account: Option<&str>,
) -> Result<Identity, IdentityError> {
    let destination_namespace = app.spec.destination.namespace.as_str();
    let sa_namespace = if destination_namespace.is_empty() {
        app.namespace()
    } else {
        destination_namespace
    };
    if impersonation.enabled {
        for item in &project.spec.destination_service_accounts {
            let server = glob(&item.server, IN_CLUSTER_SERVER)?;
            let namespace = glob(&item.namespace, destination_namespace)?;
            if !(server && namespace) {
                continue;
            }
            let sa = &item.default_service_account;
            if sa.trim().is_empty() || sa.contains(DISALLOWED) {
                return Err(IdentityError::InvalidServiceAccount(sa.clone()));
            }
            let user = match sa.split_once(':') {
                Some(_) => format!("system:serviceaccount:{sa}"),
                None => service_account_user(sa_namespace, sa),
            };
            return Ok(Identity::Project { user });
        }
        if impersonation.enforced {
            return Err(IdentityError::NoMatch {
                server: IN_CLUSTER_SERVER.to_owned(),
                namespace: destination_namespace.to_owned(),
            });
        }
    }
    Ok(match default_service_account.filter(|s| !s.is_empty()) {
        Some(sa) => Identity::DefaultServiceAccount {
            user: service_account_user(sa_namespace, sa),
        },
        None => Identity::Own,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn project(spec: serde_json::Value) -> AppProject {
        serde_json::from_value(
            json!({"metadata": {"name": "team", "namespace": "argocd"}, "spec": spec}),
        )
        .unwrap()
    }

    fn app(destination: serde_json::Value) -> Application {
        serde_json::from_value(json!({"metadata": {"name": "db", "namespace": "argocd"},
            "spec": {"project": "team", "destination": destination}}))
        .unwrap()
    }

    #[test]
    fn destinations_by_table() {
        let server = IN_CLUSTER_SERVER;
        for (destinations, namespace, permitted) in [
            (json!([{"server": "*", "namespace": "*"}]), "apps", true),
            (
                json!([{"server": server, "namespace": "apps"}]),
                "apps",
                true,
            ),
            (
                json!([{"server": server, "namespace": "apps"}]),
                "other",
                false,
            ),
            (
                json!([{"name": "in-cluster", "namespace": "team-*"}]),
                "team-a",
                true,
            ),
            (
                json!([{"name": "in-cluster", "namespace": "team-*"}]),
                "teamb",
                false,
            ),
            (
                json!([{"server": "https://prod:6443", "namespace": "*"}]),
                "apps",
                false,
            ),
            (json!([{"server": "*", "namespace": "{a,b}"}]), "b", true),
            (json!([{"server": "*", "namespace": "ap?s"}]), "apps", true),
            (json!([]), "apps", false),
            // A deny pattern on the namespace wins over an allowing entry.
            (
                json!([{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-system"}]),
                "kube-system",
                false,
            ),
            (
                json!([{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-system"}]),
                "apps",
                true,
            ),
            // A deny pattern on the server: the in-cluster server is excluded.
            (
                json!([{"server": "*", "namespace": "*"}, {"server": format!("!{server}"), "namespace": "*"}]),
                "apps",
                false,
            ),
            // A pattern that does not compile matches nothing.
            (
                json!([{"server": "*", "namespace": "[apps"}]),
                "apps",
                false,
            ),
        ] {
            let p = project(json!({"destinations": destinations}));
            assert_eq!(
                p.in_cluster_namespace_permitted(namespace),
                permitted,
                "{destinations} {namespace}"
            );
        }
    }

    #[test]
    fn the_statefulset_kind_by_table() {
        for (spec, permitted) in [
            (json!({}), true),
            (json!({"namespaceResourceWhitelist": []}), false),
            (
                json!({"namespaceResourceWhitelist": [{"group": "apps", "kind": "StatefulSet"}]}),
                true,
            ),
            (
                json!({"namespaceResourceWhitelist": [{"group": "*", "kind": "*"}]}),
                true,
            ),
            (
                json!({"namespaceResourceWhitelist": [{"group": "apps", "kind": "Deployment"}]}),
                false,
            ),
            (
                json!({"namespaceResourceBlacklist": [{"group": "apps", "kind": "StatefulSet"}]}),
                false,
            ),
            (
                json!({"namespaceResourceBlacklist": [{"group": "", "kind": "ConfigMap"}]}),
                true,
            ),
        ] {
            assert_eq!(
                project(spec.clone()).statefulset_kind_permitted(),
                permitted,
                "{spec}"
            );
        }
    }

    #[test]
    fn refusals_use_argo_cds_words() {
        let p = project(json!({"destinations": [{"server": "*", "namespace": "apps"}]}));
        assert_eq!(p.permits_statefulset("apps"), Ok(()));
        assert_eq!(
            p.permits_statefulset("kube-system")
                .unwrap_err()
                .to_string(),
            "namespace kube-system is not permitted in project 'team'"
        );
        let p = project(json!({"destinations": [{"server": "*", "namespace": "*"}],
            "namespaceResourceBlacklist": [{"group": "apps", "kind": "*"}]}));
        assert_eq!(
            p.permits_statefulset("apps").unwrap_err().to_string(),
            "resource apps:StatefulSet is not permitted in project team"
        );
        let p = project(json!({"destinations": [{"server": "*", "namespace": "*"}],
            "permitOnlyProjectScopedClusters": true}));
        assert!(matches!(
            p.permits_statefulset("apps"),
            Err(NotPermitted::ProjectScopedClusters { .. })
        ));
    }

    #[test]
    fn impersonation_settings_read_as_argo_cd_reads_them() {
        let cm = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            Impersonation::from_argocd_cm(None),
            Impersonation {
                enabled: false,
                enforced: true
            }
        );
        for (data, enabled, enforced) in [
            (cm(&[(IMPERSONATION_ENABLED, "true")]), true, true),
            (cm(&[(IMPERSONATION_ENABLED, "True")]), false, true),
            (
                cm(&[
                    (IMPERSONATION_ENABLED, "true"),
                    (IMPERSONATION_ENFORCED, "false"),
                ]),
                true,
                false,
            ),
            (cm(&[(IMPERSONATION_ENFORCED, "no")]), false, true),
        ] {
            assert_eq!(
                Impersonation::from_argocd_cm(Some(&data)),
                Impersonation { enabled, enforced },
                "{data:?}"
            );
        }
    }

    #[test]
    fn identity_by_table() {
        let on = Impersonation {
            enabled: true,
            enforced: true,
        };
        let lenient = Impersonation {
            enabled: true,
            enforced: false,
        };
        let off = Impersonation::default();
        let accounts = json!({"destinationServiceAccounts": [
            {"server": "https://prod:6443", "namespace": "*", "defaultServiceAccount": "prod-deployer"},
            {"server": "*", "namespace": "apps", "defaultServiceAccount": "deployer"},
            {"server": "https://kubernetes.default.svc", "namespace": "team-*", "defaultServiceAccount": "sync:team-sa"},
            {"server": "*", "namespace": "bad", "defaultServiceAccount": "a*b"},
        ]});
        let dest = |ns: &str| json!({"server": IN_CLUSTER_SERVER, "namespace": ns});
        for (destination, settings, default_sa, expected) in [
            (
                dest("apps"),
                on,
                Some("fallback"),
                Ok(Identity::Project {
                    user: "system:serviceaccount:apps:deployer".into(),
                }),
            ),
            (
                dest("team-x"),
                on,
                None,
                Ok(Identity::Project {
                    user: "system:serviceaccount:sync:team-sa".into(),
                }),
            ),
            (
                dest("other"),
                on,
                Some("fallback"),
                Err(IdentityError::NoMatch {
                    server: IN_CLUSTER_SERVER.into(),
                    namespace: "other".into(),
                }),
            ),
            (
                dest("other"),
                lenient,
                Some("fallback"),
                Ok(Identity::DefaultServiceAccount {
                    user: "system:serviceaccount:other:fallback".into(),
                }),
            ),
            (dest("other"), lenient, None, Ok(Identity::Own)),
            (
                dest("apps"),
                off,
                Some("fallback"),
                Ok(Identity::DefaultServiceAccount {
                    user: "system:serviceaccount:apps:fallback".into(),
                }),
            ),
            (dest("apps"), off, Some(""), Ok(Identity::Own)),
            (
                dest("bad"),
                on,
                None,
                Err(IdentityError::InvalidServiceAccount("a*b".into())),
            ),
            // No destination namespace: a bare name is in the Application's namespace.
            (
                json!({"name": "in-cluster"}),
                off,
                Some("fallback"),
                Ok(Identity::DefaultServiceAccount {
                    user: "system:serviceaccount:argocd:fallback".into(),
                }),
            ),
        ] {
            let got = identity(
                &project(accounts.clone()),
                &app(destination.clone()),
                settings,
                default_sa,
            );
            assert_eq!(got, expected, "{destination} {settings:?} {default_sa:?}");
        }
        assert_eq!(Identity::Own.user(), None);
        assert_eq!(Identity::Own.source(), "the service's own");
        assert_eq!(
            IdentityError::NoMatch {
                server: IN_CLUSTER_SERVER.into(),
                namespace: "x".into()
            }
            .to_string(),
            "no matching service account found for destination server https://kubernetes.default.svc and namespace x"
        );
    }
}
