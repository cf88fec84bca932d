//! The journal's side of a start: the intents a previous process left unfinished, finished
//! by the next leader before it runs anything else.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::cluster::tenant::{TenantCluster, impersonating};
use crate::journal::{Intent, OWN_IDENTITY};
use crate::model::Kind;
use crate::records::results::Shard;

/// What finishes a previous process's unfinished converges when this one starts leading.
pub trait Resume: Send + Sync + 'static {
    fn resume_all(&self) -> BoxFuture<'_, ()>;

    /// The intents the last [`Resume::resume_all`] left in the journal because they are not
    /// what they say (named in `/status` as `refusedIntents`).
    fn refused(&self) -> Vec<crate::journal::RefusedIntent> {
        Vec::new()
    }
}

/// Finishes the intents a previous process left in the journal (`converge::resume_all`):
/// no crash leaves a StatefulSet deleted, and this is where the next leader makes sure of it.
/// Each intent is finished as the identity it was recorded under (the tenant, impersonated),
/// and only if that is the identity its Kustomization uses now, never with the service's own
/// rights for a tenant's work: whoever can write a labelled Secret in the service's namespace
/// must not get a StatefulSet re-applied with more. First the intents earlier versions wrote
/// as ConfigMaps are moved into Secrets. An absent StatefulSet is not re-created here (no
/// render is at hand to say its Kustomization still has it): its Kustomization's next converge
/// does that.
pub struct JournalResume {
    pub client: kube::Client,
    /// The journal's namespace (`--namespace`).
    pub namespace: String,
    pub call_timeout: Duration,
    pub wait_timeout: Duration,
    /// Asked before each write of a resume (this replica's Lease, and the shutdown's windows).
    pub fence: Option<crate::converge::fence::SharedFence>,
    /// Only this shard's intents are resumed: another shard's leader may be finishing its own.
    pub shard: Shard,
    /// `--default-service-account`: the identity a Kustomization without
    /// `spec.serviceAccountName` acts as, which an intent's `actAs` must match.
    pub default_service_account: Option<String>,
    /// Argo CD's own namespace (its AppProjects and `argocd-cm`), with `--argocd-server`: what
    /// an Application's identity is read from. `None`: an Application's intent is not resumed.
    pub argocd_namespace: Option<String>,
    /// Where the refused intents are kept for `/status` (`None`: only logged).
    pub intents: Option<crate::journal::watched::IntentCache>,
    /// `flux_converger_intents_refused`, set after each resume.
    pub refused_gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

impl Resume for JournalResume {
    fn resume_all(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let journal = crate::journal::SecretJournal::new(
                self.client.clone(),
                self.namespace.clone(),
                self.call_timeout,
            )
            .scoped(self.shard.clone());
            // Before the listing: an intent an earlier version wrote as a ConfigMap is listed
            // (and resumed) as a Secret, and no substituted value stays in a ConfigMap.
            if let Err(error) = journal.migrate_legacy().await {
                tracing::warn!(%error, "moving legacy intent ConfigMaps into Secrets; retried at the next start");
            }
            let options = crate::converge::Options {
                wait_timeout: self.wait_timeout,
                fence: self.fence.clone(),
                ..Default::default()
            };
            let cluster_for = |intent: &crate::journal::Intent| {
                let intent = intent.clone();
                async move {
                    cluster_for_intent(
                        &self.client,
                        &intent,
                        &Owners {
                            default_service_account: self.default_service_account.as_deref(),
                            argocd_namespace: self.argocd_namespace.as_deref(),
                        },
                        self.call_timeout,
                    )
                    .await
                }
            };
            match crate::converge::resume_all(cluster_for, &journal, &options).await {
                Ok(resumed) => {
                    for unreadable in resumed.unreadable {
                        tracing::warn!(record = %unreadable.object, message = %unreadable.message,
                            "skipping an unreadable intent record (fix or delete it by hand)");
                    }
                    for kept in &resumed.not_resumed {
                        tracing::warn!(statefulset = %format!("{}/{}", kept.namespace, kept.name),
                            record = %kept.object,
                            act_as = kept.act_as.as_deref().unwrap_or_default(), reason = %kept.reason,
                            "not resuming an unfinished converge: kept in the journal (finish it with `flux-converger converge` as an operator)");
                    }
                    if let Some(gauge) = &self.refused_gauge {
                        gauge.set(resumed.not_resumed.len() as i64);
                    }
                    if let Some(cache) = &self.intents {
                        cache.set_refused(resumed.not_resumed);
                    }
                    for (namespace, name, result) in resumed.results {
                        let statefulset = format!("{namespace}/{name}");
                        match result {
                            Ok(report) => {
                                tracing::info!(%statefulset, action = ?report.action, "resumed an unfinished converge")
                            }
                            Err(error) => {
                                tracing::warn!(%statefulset, %error, "resuming an unfinished converge failed; retried at the next start")
                            }
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "listing unfinished converges"),
            }
        })
    }

    fn refused(&self) -> Vec<crate::journal::RefusedIntent> {
        self.intents
            .as_ref()
            .map(crate::journal::watched::IntentCache::refused)
            .unwrap_or_default()
    }
}

/// What an intent's owner (`Intent::kustomization`) names: `namespace/name` of a
/// Kustomization, `Kind/namespace/name` of another kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> Owner<'a> {
    /// The owner `text` names; `None` when it names none this service gates.
    pub fn parse(text: &'a str) -> Option<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let (kind, namespace, name) = match parts[..] {
            [namespace, name] => (Kind::KUSTOMIZATION, namespace, name),
            [kind, namespace, name] => (
                [Kind::HELM_RELEASE, Kind::APPLICATION]
                    .into_iter()
                    .find(|k| k.as_str() == kind)?,
                namespace,
                name,
            ),
            _ => return None,
        };
        (!namespace.is_empty() && !name.is_empty()).then_some(Owner {
            kind,
            namespace,
            name,
        })
    }
}

/// Why an intent is not resumed: kept in the journal and reported (`/status` `refusedIntents`,
/// `flux_converger_intents_refused`), never resumed with more rights than its object has now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresumable {
    #[error(
        "the intent does not record the identity it was written as (a record of an earlier \
         version): not resumed with the service's own rights"
    )]
    NoIdentity,
    #[error(
        "the intent would resume with the service's own identity, but {kind} {object} acts as \
         {current:?} now: a tenant's intent never resumes as the service"
    )]
    NotAsTheService {
        kind: String,
        object: String,
        current: String,
    },
    #[error("the intent was recorded as {recorded:?}, but {kind} {object} acts as {current:?} now")]
    IdentityChanged {
        recorded: String,
        kind: String,
        object: String,
        current: String,
    },
    #[error(
        "the intent does not name the Kustomization it came from (an earlier version's or the \
         `converge` command's): its identity cannot be checked; finish it with \
         `flux-converger converge` as an operator"
    )]
    NoOwner,
    /// Its object could not be read (the message names why).
    #[error("its {kind} cannot be read, so its identity cannot be checked: {cause}")]
    OwnerUnreadable { kind: &'static str, cause: String },
    #[error("its Application's identity cannot be checked without --argocd-server")]
    NoArgoCd,
    #[error("its Application's identity cannot be read, so it cannot be checked: {0}")]
    ApplicationIdentity(String),
    /// The intent's desired StatefulSet could not be encoded to be read again.
    #[error("{0}")]
    Desired(String),
    /// The identity it records cannot be impersonated.
    #[error("{0}")]
    Impersonation(String),
}

/// What deciding an owner's identity now takes besides the cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct Owners<'a> {
    /// `--default-service-account`.
    pub default_service_account: Option<&'a str>,
    /// Argo CD's own namespace, with `--argocd-server` (an Application's identity is read
    /// from its AppProject there and `argocd-cm`).
    pub argocd_namespace: Option<&'a str>,
}

/// Whether `intent` may be resumed by the service as the identity it records: only if it
/// names the gated object it came from and that object (`current`: the identity it acts as
/// now, `None` = the service's own) would act as the same identity.
/// Pure: the check of what a writer of the journal could forge, by table.
pub fn check_identity(intent: &Intent, current: Option<&str>) -> Result<(), Unresumable> {
    let Some(recorded) = intent.act_as.as_deref() else {
        return Err(Unresumable::NoIdentity);
    };
    let current = current.unwrap_or(OWN_IDENTITY);
    if recorded == current {
        return Ok(());
    }
    let owner = intent.kustomization.as_deref().unwrap_or_default();
    let (kind, object) = match Owner::parse(owner) {
        Some(o) => (o.kind.as_str(), format!("{}/{}", o.namespace, o.name)),
        None => ("Kustomization", owner.to_string()),
    };
    let (kind, current) = (kind.to_string(), current.to_string());
    Err(if recorded == OWN_IDENTITY {
        Unresumable::NotAsTheService {
            kind,
            object,
            current,
        }
    } else {
        Unresumable::IdentityChanged {
            recorded: recorded.to_string(),
            kind,
            object,
            current,
        }
    })
}

/// The cluster to finish `intent` with, on start: impersonating the user it was recorded
/// under, the service's own identity only for [`OWN_IDENTITY`], and either only if the
/// gated object it names (a Kustomization, a HelmRelease, an Application) would act as that
/// identity now ([`check_identity`]; read from the cluster). An intent that does not name its
/// object (an earlier version's, or one the `converge` command wrote), whose object is gone or
/// cannot be read, or whose identity differs gets none: it is kept and reported, never resumed
/// with more rights than its object has now. An Application's StatefulSet is written as Argo
/// CD writes it (`argocd-controller`, by create or by apply).
pub async fn cluster_for_intent(
    service: &kube::Client,
    intent: &Intent,
    owners: &Owners<'_>,
    call_timeout: Duration,
) -> Result<TenantCluster, Unresumable> {
    if intent.act_as.is_none() {
        check_identity(intent, None)?;
    }
    let Some(owner) = intent.kustomization.as_deref().and_then(Owner::parse) else {
        return Err(Unresumable::NoOwner);
    };
    let (namespace, name) = (owner.namespace, owner.name);
    if owner.kind == Kind::HELM_RELEASE {
        let api: kube::Api<crate::helm::helmrelease::HelmRelease> =
            kube::Api::namespaced(service.clone(), namespace);
        let hr = crate::cluster::with_deadline(
            call_timeout,
            "get",
            &format!("HelmRelease {namespace}/{name}"),
            api.get(name),
        )
        .await
        .map_err(|e| Unresumable::OwnerUnreadable {
            kind: "HelmRelease",
            cause: e.to_string(),
        })?;
        let current = crate::gated::Gated::user(&hr, owners.default_service_account);
        check_identity(intent, current.as_deref())?;
        return tenant_cluster(service, intent, call_timeout);
    }
    if owner.kind == Kind::APPLICATION {
        let Some(argocd_namespace) = owners.argocd_namespace else {
            return Err(Unresumable::NoArgoCd);
        };
        let desired = serde_json::to_value(&intent.desired)
            .map_err(|e| Unresumable::Desired(e.to_string()))?;
        let (current, write_as) = crate::service::application::run::identity_now(
            service,
            namespace,
            name,
            argocd_namespace,
            owners.default_service_account,
            &desired,
            call_timeout,
        )
        .await
        .map_err(|e| Unresumable::ApplicationIdentity(e.to_string()))?;
        check_identity(intent, current.as_deref())?;
        let writes = [((intent.namespace.clone(), intent.name.clone()), write_as)].into();
        return tenant_cluster(service, intent, call_timeout).map(|c| c.with_writes_as(writes));
    }
    let kustomization =
        crate::flux::objects::get_kustomization_within(service, namespace, name, call_timeout)
            .await
            .map_err(|e| Unresumable::OwnerUnreadable {
                kind: "Kustomization",
                cause: e.to_string(),
            })?;
    let current = crate::gated::Gated::user(&kustomization, owners.default_service_account);
    check_identity(intent, current.as_deref())?;
    tenant_cluster(service, intent, call_timeout)
}

/// The cluster an intent whose identity was checked resumes through: as the identity it
/// records (impersonated), or the service's own.
fn tenant_cluster(
    service: &kube::Client,
    intent: &Intent,
    call_timeout: Duration,
) -> Result<TenantCluster, Unresumable> {
    match intent.act_as.as_deref() {
        Some(OWN_IDENTITY) | None => Ok(TenantCluster::new(
            service.clone(),
            service.clone(),
            call_timeout,
        )),
        Some(user) => impersonating(service, user)
            .map(|tenant| TenantCluster::new(tenant, service.clone(), call_timeout))
            .map_err(|e| Unresumable::Impersonation(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_named_as_the_step_records_them() {
        for (text, expected) in [
            ("team/apps", Some((Kind::KUSTOMIZATION, "team", "apps"))),
            (
                "HelmRelease/demo/web",
                Some((Kind::HELM_RELEASE, "demo", "web")),
            ),
            (
                "Application/argocd/db",
                Some((Kind::APPLICATION, "argocd", "db")),
            ),
            ("ConfigMap/toys/db", None),
            ("team", None),
            ("a/b/c/d", None),
            ("/apps", None),
            ("Application//db", None),
        ] {
            assert_eq!(
                Owner::parse(text).map(|o| (o.kind, o.namespace, o.name)),
                expected,
                "{text}"
            );
        }
        let intent = Intent {
            namespace: "apps".into(),
            name: "db".into(),
            uid: "u".into(),
            desired: Default::default(),
            plan: serde_json::Value::Null,
            recorded_at: String::new(),
            revision: None,
            deleting: false,
            act_as: Some(OWN_IDENTITY.into()),
            kustomization: Some("Application/argocd/db".into()),
        };
        let refused =
            check_identity(&intent, Some("system:serviceaccount:apps:deployer")).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("Application argocd/db acts as"),
            "{refused}"
        );
    }

    #[test]
    fn an_intent_resumes_only_as_its_kustomizations_identity_now_by_table() {
        let tenant = "system:serviceaccount:team:deployer";
        let other = "system:serviceaccount:team:other";
        let intent = |act_as: Option<&str>| Intent {
            namespace: "team".into(),
            name: "web".into(),
            uid: "u".into(),
            desired: Default::default(),
            plan: serde_json::Value::Null,
            recorded_at: String::new(),
            revision: None,
            deleting: false,
            act_as: act_as.map(String::from),
            kustomization: Some("team/apps".into()),
        };
        for (recorded, current, ok, words) in [
            (Some(tenant), Some(tenant), true, ""),
            (Some(OWN_IDENTITY), None, true, ""),
            (
                Some(OWN_IDENTITY),
                Some(tenant),
                false,
                "never resumes as the service",
            ),
            (
                Some(tenant),
                Some(other),
                false,
                "acts as \"system:serviceaccount:team:other\"",
            ),
            (Some(tenant), None, false, "acts as \"-\" now"),
            (None, None, false, "earlier version"),
        ] {
            let got = check_identity(&intent(recorded), current);
            assert_eq!(got.is_ok(), ok, "{recorded:?} now {current:?}: {got:?}");
            if let Err(message) = got {
                assert!(message.to_string().contains(words), "{message}");
            }
        }
    }
}
