//! The knobs of one converge, shared by every phase (and the callers that fill them).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::{fence, prove};

/// Knobs of one converge.
#[derive(Clone, Debug)]
pub struct Options {
    /// Decide and prove only; write nothing (not even the journal, nor a resume).
    pub dry_run: bool,
    /// How long the orphan delete may take (the garbage collector removes the finalizer).
    pub wait_timeout: Duration,
    /// The source revision the desired object was rendered from, when known (the service
    /// passes the artifact's): recorded in the intent so a resume says what it finishes.
    pub revision: Option<String>,
    /// Asked right before the claim patches and right before the orphan delete (and a
    /// resume's re-apply): the service's Lease, so a replica that lost it writes nothing more.
    pub fence: Option<fence::SharedFence>,
    /// Who the cluster's writes act as: the impersonated user (`system:serviceaccount:NS:SA`),
    /// `None` for the process's own identity. Recorded in the intent, so a resume acts as the
    /// same identity, never with more rights; named in access failures.
    pub act_as: Option<String>,
    /// The server's "forbidden in place" answers, shared by the converges that pass the same
    /// memory (one run of the command; every run of the service).
    pub in_place: prove::InPlaceMemory,
    /// The Kustomization (`namespace/name`) whose revision is converged, when known (the
    /// service's): recorded in the intent, so a resume on start can ask which identity that
    /// Kustomization would use now.
    pub kustomization: Option<String>,
    /// The caller is an operator (the `converge` command): an intent recorded under any
    /// identity is finished under the caller's own. Otherwise (the service) an intent recorded
    /// under another identity than [`Options::act_as`] is refused, not resumed.
    pub resume_as_operator: bool,
    /// The StatefulSets `(namespace, name)` the caller's current render has (the command: its
    /// file), for [`resume_all`]: an absent StatefulSet whose intent says our delete was sent
    /// is re-created only if its render still has it. `None`: no render at hand (the service
    /// on start), so none is re-created there; the next converge of its Kustomization does it.
    pub renders: Option<Arc<BTreeSet<(String, String)>>>,
    /// How claims' last expansions ended, as the caller knows besides their status (the
    /// service's records, which also read the resize Events of servers before 1.32), keyed by
    /// `namespace/claim`: what decides a recovery (`decide::decide_with`).
    pub known_states: Arc<std::collections::BTreeMap<String, crate::volume::VolumeState>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dry_run: false,
            wait_timeout: Duration::from_secs(120),
            revision: None,
            fence: None,
            act_as: None,
            in_place: prove::InPlaceMemory::default(),
            kustomization: None,
            resume_as_operator: false,
            renders: None,
            known_states: Arc::default(),
        }
    }
}
