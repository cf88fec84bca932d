//! `flux-converger converge`: converge the StatefulSets of a file against the current kube
//! context (kubeconfig, or in-cluster), finishing unfinished intents first. The file is
//! converged all or nothing, as the service converges a revision: every StatefulSet is
//! decided, proven and pre-flighted before any is written.
//!
//! Exit codes: 0 done, 3 one or more refused (nothing written for any), 2 bad input,
//! 1 a failure (a re-run finishes the work); with `--wait-for-volumes`, 4 a claim's expansion
//! is infeasible and 5 the claims had not grown by the deadline.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde::Serialize;

use flux_converger::cluster::KubeCluster;
use flux_converger::converge::{self, ConvergeError, Options, Outcome, Report, ResumeReport};
use flux_converger::journal::{ConfigMapJournal, Intent, Journal, JournalError, Listing};
use flux_converger::manifest::{Document, Objects, describe, read_documents};

use super::{Exit, KubeArgs, bad_input, wait_volumes};

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
    /// The JSON summary as YAML.
    Yaml,
}

/// kubectl's `--dry-run` values that mean something here (`client` would prove nothing).
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    /// Converge: write.
    None,
    /// Decide and prove with a server-side dry run; write nothing.
    Server,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// YAML file with the desired StatefulSet(s) (other kinds are ignored); `-` for stdin.
    /// Required unless `--migrate-intents` is given alone.
    #[arg(
        short = 'f',
        long = "filename",
        visible_alias = "desired",
        value_name = "FILE",
        required_unless_present = "migrate_intents"
    )]
    pub filename: Option<String>,
    /// First move the intents versions before issue 27 kept as ConfigMaps into Secrets, in
    /// the journal namespaces (`--journal-namespace`, else those of the file's StatefulSets,
    /// else the current namespace); `serve` does it when it starts leading. Without it the
    /// command does not look for them: that was one request more on every run.
    #[arg(long)]
    pub migrate_intents: bool,
    /// `server`: decide and prove with a server-side dry run, write nothing. `--dry-run` alone
    /// means `server`, as in kubectl.
    #[arg(
        long,
        value_enum,
        value_name = "none|server",
        default_value_t = DryRun::None,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "server"
    )]
    pub dry_run: DryRun,
    /// Deadline of each API call, and of the wait for the orphan delete unless `--wait-timeout`
    /// is given: nothing this command does waits longer without saying so.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// How long the orphan delete may take to complete (default: `--timeout`).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub wait_timeout: Option<Duration>,
    /// The field manager a Helm release's StatefulSet (Helm's ownership metadata, as `render
    /// --helm-release` prints it) is proven and re-applied with: helm-controller's, so its
    /// next server-side upgrade does not conflict with the re-create. Other StatefulSets use
    /// kustomize-controller's.
    #[arg(long, env = "FLUX_CONVERGER_HELM_FIELD_MANAGER", default_value = flux_converger::helm::manifest::DEFAULT_FIELD_MANAGER)]
    pub helm_field_manager: String,
    /// Namespace of the journal's ConfigMaps (intents). Default: each StatefulSet's own
    /// namespace, which exists and is writable wherever the StatefulSet is, Flux or not.
    #[arg(long, env = "FLUX_CONVERGER_JOURNAL_NAMESPACE")]
    pub journal_namespace: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// After the converge, follow the claims it grew until each has grown (its capacity
    /// reached the request), printing one line per state change, at most DURATION (`30m`
    /// when given alone). Exit 0 when all grew, 4 when one is infeasible, 5 at the deadline.
    #[arg(
        long,
        value_name = "DURATION",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "30m",
        value_parser = humantime::parse_duration
    )]
    pub wait_for_volumes: Option<Duration>,
    /// With `--wait-for-volumes`: a claim not grown (nor infeasible) this long after its
    /// request is reported `stalled` (and still followed).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = humantime::parse_duration)]
    pub resize_timeout: Duration,
}

/// The desired StatefulSets of the file, each with its namespace set; typed and checked by
/// the same reader as `plan`, so both commands refuse the same bad input with the same words.
fn desired_statefulsets(
    path: &str,
    docs: &[Document],
    namespace: Option<&str>,
    default_namespace: &str,
) -> anyhow::Result<Vec<StatefulSet>> {
    // As `kubectl apply -n`: an object that names another namespace than the flag is a mistake.
    if let Some(flag) = namespace {
        for doc in docs {
            let own = doc
                .object
                .pointer("/metadata/namespace")
                .and_then(|v| v.as_str());
            let is_sts = doc.object.get("kind").and_then(|v| v.as_str()) == Some("StatefulSet");
            if let (true, Some(own)) = (is_sts, own.filter(|o| !o.is_empty() && *o != flag)) {
                return Err(bad_input(anyhow::anyhow!(
                    "{} document {}: {} is in namespace {own:?}, but --namespace is {flag:?}",
                    doc.source,
                    doc.index,
                    describe(&doc.object)
                )));
            }
        }
    }
    let objects =
        Objects::from_documents(docs, namespace.unwrap_or(default_namespace)).map_err(bad_input)?;
    if objects.statefulsets.is_empty() {
        return Err(bad_input(anyhow::anyhow!(
            "{path}: no apps/v1 StatefulSet in the file"
        )));
    }
    Ok(objects.statefulsets.into_iter().map(|l| l.object).collect())
}

/// `--migrate-intents`: moves the intent ConfigMaps of earlier versions of each journal
/// namespace into Secrets (`SecretJournal::migrate_legacy`), saying each on stdout, or on
/// stderr when stdout carries `-o json|yaml`. Nothing was written when it fails.
async fn migrate_intents<'a>(
    client: &kube::Client,
    namespaces: impl IntoIterator<Item = &'a str>,
    timeout: Duration,
    quiet_stdout: bool,
) -> anyhow::Result<()> {
    for namespace in namespaces {
        let journal = ConfigMapJournal::new(client.clone(), namespace, timeout);
        let migrated = journal.migrate_legacy().await.with_context(|| {
            format!(
                "cannot move the legacy intent ConfigMaps of namespace {namespace} into Secrets (run converge --migrate-intents again)"
            )
        })?;
        for moved in &migrated.moved {
            let line = format!("moved legacy intent {moved} into a Secret of the same name");
            if quiet_stdout {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        }
        if migrated.moved.is_empty() && !quiet_stdout {
            println!("no legacy intent ConfigMap in namespace {namespace}");
        }
    }
    Ok(())
}

/// The journal of each StatefulSet: its own namespace's, or `--journal-namespace`'s, so one
/// file spanning namespaces is still one set converged all or nothing.
struct Journals {
    client: kube::Client,
    /// `--journal-namespace`, when given.
    at: Option<String>,
    /// Every namespace a journal is kept in (what `list` reads).
    namespaces: BTreeSet<String>,
    /// Journal namespaces this run has just listed and left with no intent: every intent
    /// found was finished and none was unreadable. Each StatefulSet's converge loads its
    /// intent once, at its start, so there a load would only repeat what the list said: it is
    /// answered without a request (one request fewer per StatefulSet).
    settled: BTreeSet<String>,
    timeout: Duration,
}

impl Journals {
    /// The journal namespace of a StatefulSet in `namespace`.
    fn at<'a>(&'a self, namespace: &'a str) -> &'a str {
        self.at.as_deref().unwrap_or(namespace)
    }

    fn of(&self, namespace: &str) -> ConfigMapJournal {
        ConfigMapJournal::new(self.client.clone(), self.at(namespace), self.timeout)
    }
}

impl Journal for Journals {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        self.of(&intent.namespace).record(intent).await
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        if self.settled.contains(self.at(namespace)) {
            return Ok(None);
        }
        self.of(namespace).load(namespace, name).await
    }

    async fn list(&self) -> Result<Listing, JournalError> {
        let mut all = Listing::default();
        for namespace in &self.namespaces {
            let mut one = self.of(namespace).list().await?;
            all.intents.append(&mut one.intents);
            all.unreadable.append(&mut one.unreadable);
            all.refused.append(&mut one.refused);
        }
        Ok(all)
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        self.of(namespace).clear(namespace, name).await
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Failure {
    namespace: String,
    name: String,
    step: Option<String>,
    message: String,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Entry {
    Report(Box<Report>),
    Failure { error: Failure },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResumedEntry {
    namespace: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed: Option<ResumeReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Failure>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    dry_run: bool,
    /// Unfinished intents found on start and what finishing them took.
    resumed: Vec<ResumedEntry>,
    statefulsets: Vec<Entry>,
}

fn failure(namespace: &str, name: &str, e: &ConvergeError) -> Failure {
    Failure {
        namespace: namespace.to_string(),
        name: name.to_string(),
        step: e.step().map(|s| s.to_string()),
        message: e.to_string(),
    }
}

pub async fn run(args: Args, kube: KubeArgs) -> anyhow::Result<Exit> {
    let dry_run = args.dry_run == DryRun::Server;
    let Some(filename) = args.filename.clone() else {
        // `--migrate-intents` alone (clap requires one of the two).
        let client = kube.client().await?;
        let namespace = args
            .journal_namespace
            .clone()
            .or(kube.namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_string());
        migrate_intents(&client, [namespace.as_str()], args.timeout, false).await?;
        return Ok(Exit::Done);
    };
    // Bad input is decided before any client is built: a bad file is exit 2 even where no
    // kubeconfig exists. The namespace of objects without one needs the context, read after.
    let docs = read_documents(&filename).map_err(bad_input)?;
    desired_statefulsets(&filename, &docs, kube.namespace.as_deref(), "default")?;
    let client = kube.client().await?;
    let desired = desired_statefulsets(
        &filename,
        &docs,
        kube.namespace.as_deref(),
        client.default_namespace(),
    )?;
    let cluster = KubeCluster::new(client.clone(), args.timeout)
        .with_helm_field_manager(&args.helm_field_manager);
    let journal_in = |namespace: &str| {
        let at = args.journal_namespace.as_deref().unwrap_or(namespace);
        ConfigMapJournal::new(client.clone(), at, args.timeout)
    };
    // The journals an earlier run of this command may have left intents in.
    let journal_namespaces: BTreeSet<&str> = match args.journal_namespace.as_deref() {
        Some(ns) => BTreeSet::from([ns]),
        None => desired
            .iter()
            .filter_map(|s| s.metadata.namespace.as_deref())
            .collect(),
    };
    let options = Options {
        dry_run,
        wait_timeout: args.wait_timeout.unwrap_or(args.timeout),
        revision: None,
        fence: None,
        // The operator's own identity: intents say so, and a resume uses the same.
        act_as: None,
        in_place: Default::default(),
        kustomization: None,
        // An operator finishes every intent as themselves, whoever recorded it.
        resume_as_operator: true,
        // The file is the render: an absent StatefulSet an intent says we deleted is
        // re-created only if the file still has it.
        renders: Some(std::sync::Arc::new(
            desired
                .iter()
                .filter_map(|s| Some((s.metadata.namespace.clone()?, s.metadata.name.clone()?)))
                .collect(),
        )),
        // What the claims' status says is all the command knows of their expansions.
        known_states: Default::default(),
    };

    let mut failed = false;
    let mut refused = false;
    let mut summary = Summary {
        dry_run,
        resumed: Vec::new(),
        statefulsets: Vec::new(),
    };

    // Unreadable journal records, each reported once by name (stderr, and in the JSON).
    let mut unreadable: BTreeSet<String> = BTreeSet::new();
    let mut warn_unreadable = |u: &flux_converger::journal::Unreadable| {
        if unreadable.insert(u.object.clone()) {
            eprintln!(
                "warning: journal record {} is {}: skipped (fix or delete it)",
                u.object, u.message
            );
        }
    };

    // Asked for: intents earlier versions kept in ConfigMaps become Secrets first.
    if args.migrate_intents && !dry_run {
        migrate_intents(
            &client,
            journal_namespaces.iter().copied(),
            args.timeout,
            args.output != Output::Text,
        )
        .await?;
    }

    // On start, finish what earlier runs left unfinished, whichever StatefulSet it was for.
    let mut settled = BTreeSet::new();
    for journal_namespace in journal_namespaces.iter().filter(|_| !dry_run) {
        let journal = journal_in(journal_namespace);
        let wrote = !summary.resumed.is_empty();
        // The operator finishes every intent as themselves, whoever recorded it.
        let resumed = converge::resume_all(
            |_: &Intent| std::future::ready(Ok::<_, String>(&cluster)),
            &journal,
            &options,
        )
            .await
            .with_context(|| {
                format!(
                    "cannot read the journal of unfinished intents in namespace {journal_namespace} ({}run converge again)",
                    if wrote { "" } else { "nothing was written: " }
                )
            })?;
        resumed.unreadable.iter().for_each(&mut warn_unreadable);
        for kept in &resumed.not_resumed {
            eprintln!(
                "warning: intent {} of StatefulSet {}/{} not resumed (kept in the journal): {}",
                kept.object, kept.namespace, kept.name, kept.reason
            );
        }
        if resumed.unreadable.is_empty()
            && resumed.not_resumed.is_empty()
            && resumed.results.iter().all(|(_, _, r)| r.is_ok())
        {
            settled.insert(journal_namespace.to_string());
        }
        for (namespace, name, result) in resumed.results {
            let entry = match result {
                Ok(r) => {
                    if args.output == Output::Text {
                        println!(
                            "StatefulSet {namespace}/{name}: finished the intent an earlier run left \
                             (recorded {}, uid {}): {}",
                            r.recorded_at,
                            r.recorded_uid,
                            serde_json::to_value(r.action)?.as_str().unwrap_or_default()
                        );
                    }
                    ResumedEntry {
                        namespace,
                        name,
                        resumed: Some(r),
                        error: None,
                    }
                }
                Err(e) => {
                    failed = true;
                    eprintln!("error: {e}");
                    ResumedEntry {
                        error: Some(failure(&namespace, &name, &e)),
                        namespace,
                        name,
                        resumed: None,
                    }
                }
            };
            summary.resumed.push(entry);
        }
    }

    let journals = Journals {
        client: client.clone(),
        at: args.journal_namespace.clone(),
        namespaces: journal_namespaces.iter().map(|n| n.to_string()).collect(),
        settled,
        timeout: args.timeout,
    };
    let results = converge::converge_all(&cluster, &journals, &desired, &options).await;
    let mut targets = Vec::new();
    for (sts, result) in desired.iter().zip(results) {
        let namespace = sts.metadata.namespace.clone().unwrap_or_default();
        let name = sts.metadata.name.clone().unwrap_or_default();
        match result {
            Ok(report) => {
                refused |= report.outcome == Outcome::Refused;
                if let Some(u) = &report.unreadable_intent {
                    warn_unreadable(u);
                }
                if args.output == Output::Text {
                    print!("{}", report.to_text());
                }
                if let Some(target) = wait_volumes::Target::of(sts, &report) {
                    targets.push((summary.statefulsets.len(), target));
                }
                summary.statefulsets.push(Entry::Report(Box::new(report)));
            }
            Err(e) => {
                failed = true;
                eprintln!("error: {e}");
                summary.statefulsets.push(Entry::Failure {
                    error: failure(&namespace, &name, &e),
                });
            }
        }
    }

    // The volumes are followed only once everything was written: a refused or failed file
    // has its own exit code, and nothing of it to wait for.
    let mut waited = Exit::Done;
    if let Some(deadline) = args
        .wait_for_volumes
        .filter(|_| !failed && !refused && !dry_run)
    {
        let (at, followed): (Vec<usize>, Vec<wait_volumes::Target>) = targets.into_iter().unzip();
        // With -o json|yaml stdout carries the document only: the lines go to stderr.
        let text = args.output == Output::Text;
        let done = wait_volumes::wait(
            client.clone(),
            &followed,
            deadline,
            args.resize_timeout,
            |line| {
                if text {
                    println!("{line}");
                } else {
                    eprintln!("{line}");
                }
            },
        )
        .await;
        for (i, volumes) in at.into_iter().zip(done.volumes) {
            if let Some(Entry::Report(report)) = summary.statefulsets.get_mut(i) {
                for v in volumes {
                    if let Some(slot) = report.volumes.iter_mut().find(|o| o.claim == v.claim) {
                        *slot = v;
                    }
                }
            }
        }
        waited = done.exit;
    }

    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&summary)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&summary)?),
        Output::Text => {}
    }
    Ok(if failed {
        Exit::Failure
    } else if refused {
        Exit::Refused
    } else {
        waited
    })
}
