//! Which Kustomizations the service handles, what their sources publish, and which of them
//! are due for a run. Pure: the watches feed it objects, the webhook asks it where an event
//! routes, the resync asks it what is due given the last finished records. Nothing here reads
//! a cluster, so every rule is pinned by a table test without an API server.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::flux::event::Event;
use crate::flux::objects::{Kustomization, SourceKind};
use crate::model::{GateMode, Key, RevisionRecord, RevisionState, StatefulSetOutcome};

/// The annotation that opts a Kustomization in (`suspend`, `reconcile`) or out (`off`),
/// parsed with the hold annotation in one place ([`crate::gated::gating::Gating`]).
use crate::gated::Gated as _;
pub use crate::gated::gating::GATE_ANNOTATION;

/// What kustomize-controller reports when a grown volume size wedges a Kustomization (the
/// field list after it varies with the Kubernetes version, so only the prefix is matched).
pub const WEDGE_MESSAGE: &str = "updates to statefulset spec for fields other than";

/// A source object, by kind, namespace and name. The names are shared (`Arc<str>`): the
/// index holds one source under up to three keys (a Kustomization's entry, the readers of the
/// source, its revision), and with 10,000 Kustomizations each reading its own source the
/// copies were a third of the index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceKey {
    pub kind: SourceKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl SourceKey {
    pub fn new(kind: SourceKind, namespace: &str, name: &str) -> Self {
        SourceKey {
            kind,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }
}

/// What the index keeps of one Kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The gate in force: the annotation's, else the default; `Off` when not handled.
    pub gate: GateMode,
    /// An annotation value that is none of `suspend|reconcile|artifact|off` (treated as `off`: a typo
    /// must not hand a Kustomization to the service).
    pub invalid_gate: Option<String>,
    /// Why nothing runs for it ([`crate::gated::gating::Gating::hold`]): not due, whatever changes, until removed.
    pub hold: Option<String>,
    /// `None` when `spec.sourceRef.kind` is not a kind Flux renders from.
    pub source: Option<SourceKey>,
    /// A digest of the spec without `spec.suspend`: the suspend gate toggles that field
    /// itself, and only a change to the rest makes a finished revision worth another run.
    pub spec_digest: u64,
    /// `metadata.generation`, compared with a refused record's after a restart (when
    /// `finished_spec` is not known yet).
    pub generation: Option<i64>,
    /// `spec_digest` when the last run of this Kustomization finished (in this process).
    finished_spec: Option<u64>,
    /// It names a `spec.serviceAccountName`: its runs impersonate (the access check asks for
    /// `impersonate`).
    pub impersonates: bool,
    /// How long kustomize-controller waits before retrying it after a failure
    /// (`spec.retryInterval`, else `spec.interval`): the queue waits as long after a failed run.
    pub retry: Option<Duration>,
    /// The relist that last listed it ([`Index::begin_relist`]): what the end of a relist
    /// removes is what it did not list.
    listed: u32,
}

impl Entry {
    pub fn handled(&self) -> bool {
        self.gate != GateMode::Off
    }
}

/// Why a handled Kustomization is due for a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// No record yet.
    NeverRun,
    /// The source publishes a revision other than the last one finished.
    NewRevision,
    /// The last run of this revision did not finish (`running` after a restart, or `failed`).
    Unfinished,
    /// The revision converged but left claims to grow once they are Bound.
    Deferred,
    /// The spec changed since the last run finished (a patch may change the StatefulSets).
    SpecChanged,
}

impl Due {
    pub fn as_str(self) -> &'static str {
        match self {
            Due::NeverRun => "never-run",
            Due::NewRevision => "new-revision",
            Due::Unfinished => "unfinished",
            Due::Deferred => "deferred",
            Due::SpecChanged => "spec-changed",
        }
    }
}

/// How an event routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Handled Kustomizations the event names, sorted.
    pub keys: Vec<Key>,
    /// The event is Flux reporting the wedge this service exists for: run now, whatever the
    /// backoff of an earlier failure says.
    pub wedged: bool,
}

/// What changed when a Kustomization was applied to the index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub handled: bool,
    /// First seen, or its gate, hold, source or spec (but `suspend`) changed.
    pub changed: bool,
}

/// What the index keeps of one source: its revision, and the relist that last listed it.
#[derive(Clone, Debug)]
struct Published {
    revision: Option<Box<str>>,
    listed: u32,
}

/// Handled Kustomizations, their sources, and the source revisions.
#[derive(Debug)]
pub struct Index {
    default_gate: GateMode,
    kustomizations: BTreeMap<Key, Entry>,
    revisions: HashMap<SourceKey, Published>,
    /// The Kustomizations reading each source, sorted: most sources have one or two readers,
    /// so a `Vec` (one small allocation) rather than a B-tree set (a whole node for one key).
    by_source: HashMap<SourceKey, Vec<Key>>,
    /// ExternalArtifact → the upstream its `spec.sourceRef` names: a Kustomization in
    /// `artifact` mode is due on the upstream's revisions (what it converges), not on the
    /// ExternalArtifact's (what the service itself published).
    upstreams: HashMap<SourceKey, SourceKey>,
    /// Bumped by every change `/status` shows (a gate, a source, a revision, a Kustomization
    /// added or gone), never by an update that changes none of them.
    generation: u64,
    /// The Kustomizations' relist in progress (or the last one): see [`Index::begin_relist`].
    relist: u32,
    /// The last number handed to a source watch's relist ([`Index::begin_source_relist`]).
    source_relist: u32,
}

impl Index {
    pub fn new(default_gate: GateMode) -> Self {
        Index {
            default_gate,
            kustomizations: BTreeMap::new(),
            revisions: HashMap::new(),
            by_source: HashMap::new(),
            upstreams: HashMap::new(),
            generation: 0,
            relist: 0,
            source_relist: 0,
        }
    }

    /// The same source under the names the index already holds for it (one copy of each).
    fn interned(&self, source: SourceKey) -> SourceKey {
        if let Some((known, _)) = self.revisions.get_key_value(&source) {
            return known.clone();
        }
        if let Some((known, _)) = self.by_source.get_key_value(&source) {
            return known.clone();
        }
        source
    }

    /// Starts a relist of the Kustomizations (their watch's Init): what it lists is applied
    /// as it arrives ([`Index::apply_kustomization`] stamps it with the number returned), and
    /// [`Index::end_kustomization_relist`] then removes what it did not list. Nothing is held
    /// aside while the list runs: the first list of 10,000 Kustomizations was most of the
    /// process's peak when it was collected whole until `InitDone`.
    pub fn begin_relist(&mut self) -> u32 {
        self.relist = self.relist.wrapping_add(1);
        self.relist
    }

    /// Starts a relist of one source watch (its Init), as [`Index::begin_relist`] does for the
    /// Kustomizations: a number of its own (several source watches list at once), passed to
    /// [`Index::apply_listed_source`] and [`Index::end_source_relist`].
    pub fn begin_source_relist(&mut self) -> u32 {
        self.source_relist = self.source_relist.wrapping_add(1);
        self.source_relist
    }

    /// See the field: what `/status`'s cache compares.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn default_gate(&self) -> GateMode {
        self.default_gate
    }

    /// Adds or updates a Kustomization.
    pub fn apply_kustomization(&mut self, ks: &Kustomization) -> Option<(Key, Applied)> {
        let (key, mut entry) = entry_of(ks, self.default_gate)?;
        entry.source = entry.source.map(|s| self.interned(s));
        entry.listed = self.relist;
        let changed = match self.kustomizations.get(&key) {
            Some(old) => {
                entry.finished_spec = old.finished_spec;
                old.gate != entry.gate
                    || old.hold != entry.hold
                    || old.source != entry.source
                    || old.spec_digest != entry.spec_digest
            }
            None => true,
        };
        if changed {
            self.generation += 1;
        }
        let handled = entry.handled();
        self.unlink(&key);
        if let Some(source) = &entry.source {
            let readers = self.by_source.entry(source.clone()).or_default();
            if let Err(at) = readers.binary_search(&key) {
                readers.insert(at, key.clone());
            }
        }
        self.kustomizations.insert(key.clone(), entry);
        Some((key, Applied { handled, changed }))
    }

    pub fn delete_kustomization(&mut self, key: &Key) {
        self.unlink(key);
        if self.kustomizations.remove(key).is_some() {
            self.generation += 1;
        }
    }

    /// Ends a relist of Kustomizations begun with `relist` ([`Index::begin_relist`]):
    /// removes every Kustomization it did not list (deleted while the watch was down). Those
    /// it listed kept what this process remembers about their finished runs.
    pub fn end_kustomization_relist(&mut self, relist: u32) {
        let gone: Vec<Key> = self
            .kustomizations
            .iter()
            .filter(|(_, e)| e.listed != relist)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            self.delete_kustomization(key);
        }
        self.by_source.shrink_to_fit();
        self.generation += 1;
    }

    /// Replaces every Kustomization with `all` (a whole relist at once), keeping what this
    /// process remembers about finished runs of the ones still there.
    pub fn reset_kustomizations<'a>(&mut self, all: impl IntoIterator<Item = &'a Kustomization>) {
        let relist = self.begin_relist();
        for ks in all {
            self.apply_kustomization(ks);
        }
        self.end_kustomization_relist(relist);
    }

    fn unlink(&mut self, key: &Key) {
        if let Some(source) = self.kustomizations.get(key).and_then(|e| e.source.clone())
            && let Some(keys) = self.by_source.get_mut(&source)
        {
            if let Ok(at) = keys.binary_search(key) {
                keys.remove(at);
            }
            if keys.is_empty() {
                self.by_source.remove(&source);
            }
        }
    }

    /// Records what a source publishes now; returns the handled Kustomizations that read it
    /// when the revision changed (they are due): the ones reading it directly (but not those
    /// in artifact mode reading an ExternalArtifact: its revision is what the service
    /// published), and those in artifact mode whose ExternalArtifact names it as upstream.
    pub fn apply_source(&mut self, source: SourceKey, revision: Option<String>) -> Vec<Key> {
        // Between relists: the stamp it had (a new one gets its watch's next relist's).
        let relist = self.revisions.get(&source).map_or(0, |p| p.listed);
        self.apply_listed_source(source, revision, relist)
    }

    /// [`Index::apply_source`] as listed by relist `relist` ([`Index::begin_source_relist`]).
    pub fn apply_listed_source(
        &mut self,
        source: SourceKey,
        revision: Option<String>,
        relist: u32,
    ) -> Vec<Key> {
        let source = self.interned(source);
        let revision: Option<Box<str>> = revision.map(String::into_boxed_str);
        let changed = self.revisions.get(&source).map(|p| &p.revision) != Some(&revision);
        let keys = if changed {
            self.generation += 1;
            let mut keys: Vec<Key> = self
                .handled_keys_of(&source)
                .into_iter()
                .filter(|k| {
                    self.kustomizations
                        .get(k)
                        .is_some_and(|e| self.effective_source(e) == Some(&source))
                })
                .collect();
            for (artifact, _) in self.upstreams.iter().filter(|(_, up)| **up == source) {
                keys.extend(self.handled_keys_of(artifact).into_iter().filter(|k| {
                    self.kustomizations
                        .get(k)
                        .is_some_and(|e| e.gate == GateMode::Artifact)
                }));
            }
            keys.sort();
            keys.dedup();
            keys
        } else {
            Vec::new()
        };
        self.revisions.insert(
            source,
            Published {
                revision,
                listed: relist,
            },
        );
        keys
    }

    /// Records the upstream an ExternalArtifact names (`None`: none, or not a kind the
    /// artifact gate publishes from); returns the Kustomizations in artifact mode reading it
    /// when the link changed (due: their upstream, so their revision, changed).
    pub fn apply_upstream(&mut self, artifact: SourceKey, upstream: Option<SourceKey>) -> Vec<Key> {
        if self.upstreams.get(&artifact) == upstream.as_ref() {
            return Vec::new();
        }
        self.generation += 1;
        match upstream {
            Some(up) => self.upstreams.insert(artifact.clone(), up),
            None => self.upstreams.remove(&artifact),
        };
        self.handled_keys_of(&artifact)
            .into_iter()
            .filter(|k| {
                self.kustomizations
                    .get(k)
                    .is_some_and(|e| e.gate == GateMode::Artifact)
            })
            .collect()
    }

    /// Replaces the upstreams of the ExternalArtifacts of `namespace` (every namespace:
    /// `None`) with `all` (a relist of ExternalArtifacts).
    pub fn reset_upstreams(
        &mut self,
        namespace: Option<&str>,
        all: impl IntoIterator<Item = (SourceKey, SourceKey)>,
    ) {
        self.upstreams
            .retain(|k, _| namespace.is_some_and(|ns| *k.namespace != *ns));
        let all: Vec<(SourceKey, SourceKey)> = all
            .into_iter()
            .map(|(artifact, up)| (self.interned(artifact), self.interned(up)))
            .collect();
        self.upstreams.extend(all);
        self.generation += 1;
    }

    /// The sources the handled Kustomizations read: their `sourceRef`, and for the artifact
    /// gate reading an ExternalArtifact, the upstream it names too (what it renders).
    pub fn read_sources(&self) -> impl Iterator<Item = &SourceKey> {
        self.kustomizations
            .values()
            .filter(|e| e.handled())
            .flat_map(|e| {
                let upstream = self
                    .effective_source(e)
                    .filter(|s| Some(*s) != e.source.as_ref());
                e.source.iter().chain(upstream)
            })
    }

    /// The source whose revisions a Kustomization converges: its `sourceRef`, or for the
    /// artifact gate reading an ExternalArtifact, the upstream that ExternalArtifact names
    /// (`None` until known).
    fn effective_source<'a>(&'a self, entry: &'a Entry) -> Option<&'a SourceKey> {
        let source = entry.source.as_ref()?;
        if entry.gate == GateMode::Artifact && source.kind == SourceKind::ExternalArtifact {
            return self.upstreams.get(source);
        }
        Some(source)
    }

    pub fn delete_source(&mut self, source: &SourceKey) {
        if self.revisions.remove(source).is_some() {
            self.generation += 1;
        }
        if self.upstreams.remove(source).is_some() {
            self.generation += 1;
        }
    }

    /// Ends a relist of the sources of `kind` (in `namespace`, for a namespaced watch; all
    /// namespaces otherwise) begun with `relist`: removes those it did not list.
    pub fn end_source_relist(&mut self, kind: SourceKind, namespace: Option<&str>, relist: u32) {
        self.revisions.retain(|k, p| {
            k.kind != kind || namespace.is_some_and(|ns| *k.namespace != *ns) || p.listed == relist
        });
        self.revisions.shrink_to_fit();
        self.generation += 1;
    }

    /// Replaces every source of one kind (a whole relist at once).
    pub fn reset_sources(
        &mut self,
        kind: SourceKind,
        all: impl IntoIterator<Item = (SourceKey, Option<String>)>,
    ) {
        let relist = self.begin_source_relist();
        for (source, revision) in all {
            self.apply_listed_source(source, revision, relist);
        }
        self.end_source_relist(kind, None, relist);
    }

    /// Keeps the sources of `kind` only in the namespaces `keep` says (their watch stopped:
    /// no handled Kustomization reads from the others any more).
    pub fn retain_sources(&mut self, kind: SourceKind, keep: impl Fn(&str) -> bool) {
        let before = self.revisions.len();
        self.revisions
            .retain(|k, _| k.kind != kind || keep(&k.namespace));
        if kind == SourceKind::ExternalArtifact {
            self.upstreams.retain(|k, _| keep(&k.namespace));
        }
        if self.revisions.len() != before {
            self.generation += 1;
        }
    }

    fn handled_keys_of(&self, source: &SourceKey) -> Vec<Key> {
        self.by_source
            .get(source)
            .into_iter()
            .flatten()
            .filter(|k| self.kustomizations.get(*k).is_some_and(Entry::handled))
            .cloned()
            .collect()
    }

    /// The handled Kustomizations a new revision of `source` concerns: those rendering from
    /// it, through an ExternalArtifact naming it as its upstream too (artifact mode), but not
    /// the artifact-mode readers of an ExternalArtifact itself (what it publishes is the
    /// service's own doing, not news).
    fn readers_of(&self, source: &SourceKey) -> Vec<Key> {
        let direct = self.handled_keys_of(source).into_iter().filter(|k| {
            self.kustomizations
                .get(k)
                .and_then(|e| self.effective_source(e))
                == Some(source)
        });
        let through = self
            .upstreams
            .iter()
            .filter(|(_, up)| *up == source)
            .flat_map(|(external, _)| self.handled_keys_of(external))
            .filter(|k| {
                self.kustomizations
                    .get(k)
                    .and_then(|e| self.effective_source(e))
                    == Some(source)
            });
        let mut keys: Vec<Key> = direct.chain(through).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    pub fn entry(&self, key: &Key) -> Option<&Entry> {
        self.kustomizations.get(key)
    }

    /// Of `keys` (Kustomizations with records), those the watch does not hold: deleted, or no
    /// longer matching `--watch-label-selector`. Their records describe nothing that exists.
    pub fn gone(&self, keys: impl IntoIterator<Item = Key>) -> Vec<Key> {
        keys.into_iter()
            .filter(|k| !self.kustomizations.contains_key(k))
            .collect()
    }

    /// The gate of a handled Kustomization; `None` when unknown or `off`.
    pub fn handled(&self, key: &Key) -> Option<GateMode> {
        self.kustomizations
            .get(key)
            .filter(|e| e.handled())
            .map(|e| e.gate)
    }

    /// Why a handled Kustomization is held, if it is.
    pub fn hold(&self, key: &Key) -> Option<&str> {
        self.kustomizations.get(key)?.hold.as_deref()
    }

    /// The revision the Kustomization's source publishes now, as last seen (artifact mode:
    /// the revision of the upstream its ExternalArtifact names, the one it converges).
    pub fn source_revision(&self, key: &Key) -> Option<&str> {
        let source = self.effective_source(self.kustomizations.get(key)?)?;
        self.revisions.get(source)?.revision.as_deref()
    }

    /// Handled Kustomizations (of one namespace, or all), sorted by namespace then name.
    pub fn handled_keys(&self, namespace: Option<&str>) -> Vec<Key> {
        let iter: Box<dyn Iterator<Item = (&Key, &Entry)>> = match namespace {
            Some(ns) => Box::new(
                self.kustomizations
                    .range(Key::kustomization(ns, "")..)
                    .take_while(move |(k, _)| k.namespace == ns),
            ),
            None => Box::new(self.kustomizations.iter()),
        };
        iter.filter(|(_, e)| e.handled())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether any handled Kustomization is converged as its own service account.
    pub fn impersonating(&self) -> bool {
        self.kustomizations
            .values()
            .any(|e| e.handled() && e.impersonates)
    }

    pub fn handled_count(&self) -> usize {
        self.kustomizations.values().filter(|e| e.handled()).count()
    }

    /// Where a notification-controller event routes: a source's event to every handled
    /// Kustomization reading it, a Kustomization's to itself when handled. Only Kustomizations
    /// the watch has seen are named, so sharding by label selector holds for webhooks too.
    pub fn route(&self, event: &Event) -> Route {
        let object = &event.involved_object;
        let keys = match SourceKind::parse(&object.kind) {
            Some(kind) => self.readers_of(&SourceKey::new(kind, &object.namespace, &object.name)),
            None if object.kind == "Kustomization" => {
                let key = Key::kustomization(&object.namespace, &object.name);
                match self.handled(&key) {
                    Some(_) => vec![key],
                    None => Vec::new(),
                }
            }
            None => Vec::new(),
        };
        // A held Kustomization runs nothing until its hold is removed (which makes it due).
        let keys = keys
            .into_iter()
            .filter(|k| self.hold(k).is_none())
            .collect();
        let wedged = object.kind == "Kustomization" && event.message.contains(WEDGE_MESSAGE);
        Route { keys, wedged }
    }

    /// Remembers the spec a run finished with, so a later spec change makes it due again.
    pub fn note_finished(&mut self, key: &Key, spec_digest: u64) {
        if let Some(entry) = self.kustomizations.get_mut(key) {
            entry.finished_spec = Some(spec_digest);
        }
    }

    /// Whether a handled Kustomization is due, given its newest record. A Kustomization
    /// whose source publishes no revision yet is not due (there is nothing to render).
    pub fn due(&self, key: &Key, last: Option<&RevisionRecord>) -> Option<Due> {
        let entry = self
            .kustomizations
            .get(key)
            .filter(|e| e.handled() && e.hold.is_none())?;
        let revision = self.source_revision(key)?;
        let Some(last) = last else {
            return Some(Due::NeverRun);
        };
        // A refusal recorded without a revision (the source could not be read, e.g. a
        // reference the policy blocks) was not about a revision: a new one changes nothing,
        // only a new spec (below) can. Due again at every resync, it would repeat its Event.
        let revision_unknown = last.state == RevisionState::Refused && last.revision.is_empty();
        if last.revision != revision && !revision_unknown {
            return Some(Due::NewRevision);
        }
        match last.state {
            RevisionState::Running | RevisionState::Failed => return Some(Due::Unfinished),
            RevisionState::Superseded => return Some(Due::Unfinished),
            // Not while the gate is open: the re-check would close it under Flux.
            RevisionState::Converged if has_deferred(last) && !gate_open(last) => {
                return Some(Due::Deferred);
            }
            RevisionState::Converged | RevisionState::Refused => {}
        }
        match entry.finished_spec {
            Some(spec) if spec != entry.spec_digest => Some(Due::SpecChanged),
            Some(_) => None,
            // Not finished in this process (a restart): a refused record names the generation
            // it was refused at, and a refusal is never handed off, so the gate's own suspend
            // toggles cannot have moved it since.
            None => match (last.state, last.generation, entry.generation) {
                (RevisionState::Refused, Some(then), Some(now)) if now != then => {
                    Some(Due::SpecChanged)
                }
                _ => None,
            },
        }
    }

    /// Every handled Kustomization that is due, with why, sorted.
    pub fn due_keys<F>(&self, mut last: F) -> Vec<(Key, Due)>
    where
        F: FnMut(&Key) -> Option<RevisionRecord>,
    {
        self.kustomizations
            .iter()
            .filter(|(_, e)| e.handled())
            .filter_map(|(k, _)| {
                let record = last(k);
                self.due(k, record.as_ref()).map(|d| (k.clone(), d))
            })
            .collect()
    }
}

/// Whether the record's revision is handed off and Flux has not answered yet.
pub fn gate_open(record: &RevisionRecord) -> bool {
    record.handoff.is_some()
        && record
            .flux
            .as_ref()
            .is_some_and(|f| f.outcome == crate::model::FluxOutcome::Pending)
}

/// Claims left to grow once Bound make a converged revision worth re-checking.
pub fn has_deferred(record: &RevisionRecord) -> bool {
    record
        .statefulsets
        .iter()
        .any(|s| s.outcome == StatefulSetOutcome::Deferred || !s.deferred.is_empty())
}

/// The index's view of one Kustomization.
fn entry_of(ks: &Kustomization, default_gate: GateMode) -> Option<(Key, Entry)> {
    let namespace = ks.metadata.namespace.clone()?;
    let name = ks.metadata.name.clone()?;
    let gating = ks.gating(default_gate);
    let source_ref = &ks.spec.source_ref;
    let source = SourceKind::parse(&source_ref.kind).map(|kind| {
        let source_namespace = source_ref
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(&namespace);
        SourceKey::new(kind, source_namespace, &source_ref.name)
    });
    Some((
        Key::kustomization(namespace, name),
        Entry {
            gate: gating.mode,
            invalid_gate: gating.invalid,
            hold: gating.hold,
            source,
            spec_digest: spec_digest(ks),
            generation: ks.metadata.generation,
            finished_spec: None,
            impersonates: ks
                .spec
                .service_account_name
                .as_deref()
                .is_some_and(|sa| !sa.is_empty()),
            retry: ks.spec.retry_after(),
            listed: 0,
        },
    ))
}

fn spec_digest(ks: &Kustomization) -> u64 {
    let mut spec = ks.spec.clone();
    spec.suspend = false;
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// What `/status` reads of the index (`records::status_cache`).
impl crate::records::status_cache::Handled for Index {
    fn generation(&self) -> u64 {
        Index::generation(self)
    }

    fn handled_keys(&self) -> Vec<Key> {
        Index::handled_keys(self, None)
    }

    fn handled_row(&self, key: &Key) -> Option<crate::records::status_cache::HandledRow> {
        let gate = self.handled(key)?;
        Some((
            gate,
            self.source_revision(key).map(String::from),
            self.hold(key).map(String::from),
        ))
    }
}

#[cfg(test)]
mod tests;
