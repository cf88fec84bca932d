//! `flux-converger plan`: what converging each desired StatefulSet would take, offline.
//!
//! Reads the desired objects and a cluster state from files, runs the same pure `decide` the
//! converger runs, and prints the result as text, as the JSON contract, or as the kubectl
//! commands that do it by hand. The commands are generated from the same `Plan` values, so the
//! manual procedure cannot drift from what the converger does.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use flux_converger::commands::{self, Planned};
use flux_converger::decide::{
    AttributeClasses, ChangeClass, KnownStates, Plan, Refusal, decide_in,
};
use flux_converger::manifest::{Objects, read_documents};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Serialize;

use super::{Exit, KubeArgs, bad_input};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The desired objects (YAML, multi-document or a List; `-` reads stdin). Its StatefulSets
    /// are planned; other kinds are ignored.
    #[arg(
        short = 'f',
        long = "filename",
        visible_alias = "desired",
        value_name = "FILE"
    )]
    filename: String,
    /// The cluster state: what `kubectl get
    /// statefulsets,persistentvolumeclaims,storageclasses,volumeattributesclasses -A -o yaml`
    /// prints, or multi-document YAML (`-` reads stdin).
    #[arg(long, value_name = "FILE")]
    cluster_state: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    output: Output,
    /// `-o commands`: how long the script waits for each orphan delete to complete.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    wait_timeout: Duration,
}

#[derive(Copy, Clone, Debug, clap::ValueEnum)]
enum Output {
    Text,
    Json,
    /// The JSON contract as YAML.
    Yaml,
    Commands,
}

/// One desired StatefulSet and what deciding it gave.
struct Outcome {
    desired: StatefulSet,
    live_found: bool,
    /// The uid of the live StatefulSet planned on, when the cluster state has one.
    live_uid: Option<String>,
    result: Result<Plan, Refusal>,
}

/// The `-o json` contract (docs/cli.md): keep it stable.
#[derive(Serialize)]
struct Report<'a> {
    plans: Vec<&'a Plan>,
    refusals: Vec<RefusalEntry<'a>>,
}

#[derive(Serialize)]
struct RefusalEntry<'a> {
    namespace: &'a str,
    name: &'a str,
    code: &'a str,
    message: &'a str,
}

/// Offline: objects without a namespace take `-n`, else the kubeconfig context's namespace
/// (when one is readable), else `default`; no client is ever built.
pub async fn run(args: Args, kube: KubeArgs) -> anyhow::Result<Exit> {
    if args.filename == "-" && args.cluster_state == "-" {
        return Err(bad_input(anyhow::anyhow!(
            "--filename and --cluster-state cannot both read stdin (`-`)"
        )));
    }
    let namespace = kube.offline_namespace();
    let desired = read_documents(&args.filename)
        .and_then(|docs| Objects::from_documents(&docs, &namespace))
        .map_err(bad_input)?;
    let cluster = read_documents(&args.cluster_state)
        .and_then(|docs| Objects::from_documents(&docs, &namespace))
        .map_err(bad_input)?;

    let outcomes = plan_all(desired, &cluster);
    let refused = outcomes.iter().any(|o| o.result.is_err());
    let out = match args.output {
        Output::Json => render_json(&outcomes)?,
        Output::Yaml => render_yaml(&outcomes)?,
        Output::Text => render_text(&outcomes),
        Output::Commands => render_commands(&outcomes, args.wait_timeout)?,
    };
    print!("{out}");
    Ok(if refused { Exit::Refused } else { Exit::Done })
}

fn plan_all(desired: Objects, cluster: &Objects) -> Vec<Outcome> {
    let key = |s: &StatefulSet| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        )
    };
    let live: HashMap<_, _> = cluster
        .statefulsets
        .iter()
        .map(|s| (key(&s.object), &s.object))
        .collect();
    // Offline, the VolumeAttributesClasses that exist are those of the cluster state.
    let attribute_classes = AttributeClasses::Served {
        api_version: cluster
            .attribute_classes
            .first()
            .map_or_else(|| "storage.k8s.io/v1".to_owned(), |(v, _)| v.clone()),
        names: cluster
            .attribute_classes
            .iter()
            .map(|(_, n)| n.clone())
            .collect(),
    };
    let mut claims_by_namespace: HashMap<&str, Vec<PersistentVolumeClaim>> = HashMap::new();
    for c in &cluster.claims {
        let ns = c.metadata.namespace.as_deref().unwrap_or_default();
        claims_by_namespace.entry(ns).or_default().push(c.clone());
    }
    desired
        .statefulsets
        .into_iter()
        .map(|d| {
            let k = key(&d.object);
            let live = live.get(&k).copied();
            let claims = claims_by_namespace
                .get(k.0.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            let result = decide_in(
                &d.object,
                live,
                claims,
                &cluster.classes,
                &KnownStates::new(),
                &attribute_classes,
            );
            match &result {
                Ok(p) => tracing::debug!(
                    statefulset = %format!("{}/{}", p.namespace, p.name),
                    recreate = p.recreate,
                    resize = p.resize.len(),
                    deferred = p.deferred.len(),
                    "planned"
                ),
                Err(r) => tracing::debug!(
                    statefulset = %format!("{}/{}", r.namespace, r.name),
                    code = %r.code,
                    "refused"
                ),
            }
            Outcome {
                desired: d.object,
                live_found: live.is_some(),
                live_uid: live.and_then(|l| l.metadata.uid.clone()),
                result,
            }
        })
        .collect()
}

fn report(outcomes: &[Outcome]) -> Report<'_> {
    Report {
        plans: outcomes
            .iter()
            .filter_map(|o| o.result.as_ref().ok())
            .collect(),
        refusals: outcomes
            .iter()
            .filter_map(|o| o.result.as_ref().err())
            .map(|r| RefusalEntry {
                namespace: &r.namespace,
                name: &r.name,
                code: r.code.as_str(),
                message: &r.message,
            })
            .collect(),
    }
}

fn render_json(outcomes: &[Outcome]) -> anyhow::Result<String> {
    let mut s = serde_json::to_string_pretty(&report(outcomes)).context("serialising the plan")?;
    s.push('\n');
    Ok(s)
}

/// The same document as `-o json`, so either parses into the same value.
fn render_yaml(outcomes: &[Outcome]) -> anyhow::Result<String> {
    serde_saphyr::to_string(&report(outcomes)).context("serialising the plan")
}

fn render_text(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    let (mut planned, mut refused) = (0, 0);
    for o in outcomes {
        let plan = match &o.result {
            Err(r) => {
                refused += 1;
                let _ = writeln!(
                    s,
                    "StatefulSet {}/{}: REFUSED ({})\n  {}\n  nothing would be written",
                    r.namespace, r.name, r.code, r.message
                );
                continue;
            }
            Ok(p) => p,
        };
        planned += 1;
        let _ = write!(s, "StatefulSet {}/{}: ", plan.namespace, plan.name);
        if !o.live_found {
            let _ = writeln!(
                s,
                "not in the cluster state; nothing to converge (applying creates it)"
            );
            continue;
        }
        let _ = match (
            plan.recreate,
            plan.resize.is_empty() && plan.modify.is_empty(),
            plan.deferred.is_empty(),
        ) {
            _ if !plan.recover.is_empty() => writeln!(
                s,
                "recover from a failed expansion: lower the failed claims' requests to the \
                 declared size, orphan-delete and re-apply the StatefulSet"
            ),
            (false, true, true) => writeln!(s, "nothing to do"),
            (true, _, _) if plan.grown.len() == plan.changes.len() => {
                writeln!(s, "grow claims, orphan-delete and re-apply the StatefulSet")
            }
            (true, _, _) => writeln!(
                s,
                "orphan-delete and re-apply the StatefulSet to carry its immutable changes \
                 (pods and claims kept; claims grown first where a template grew)"
            ),
            (false, _, _) if plan.resize.is_empty() => writeln!(
                s,
                "move lagging claims to their template's VolumeAttributesClass only (the \
                 StatefulSet already declares it)"
            ),
            (false, _, _) => writeln!(
                s,
                "grow lagging claims only (the StatefulSet already declares their size)"
            ),
        };
        for g in &plan.grown {
            let _ = writeln!(s, "  template {}: {} -> {}", g.template, g.from, g.to);
        }
        for c in plan
            .changes
            .iter()
            .filter(|c| c.class != ChangeClass::StorageGrown)
        {
            let _ = writeln!(
                s,
                "  change {} {}: {} -> {}",
                c.class, c.field, c.live, c.declared
            );
            if let Some(note) = &c.note {
                let _ = writeln!(s, "    note: {note}");
            }
        }
        for r in &plan.recover {
            let _ = writeln!(
                s,
                "  recover claim {} ({}, {}, capacity {}): {} -> {}",
                r.claim, r.template, r.state, r.capacity, r.from, r.to
            );
        }
        for r in &plan.resize {
            let _ = writeln!(
                s,
                "  grow claim {} ({}, class {}): {} -> {}",
                r.claim, r.template, r.storage_class, r.from, r.to
            );
        }
        for m in &plan.modify {
            let _ = writeln!(
                s,
                "  move claim {} ({}) to VolumeAttributesClass {:?}: from {}",
                m.claim,
                m.template,
                m.to,
                m.from
                    .as_deref()
                    .map_or_else(|| "none".to_owned(), |f| format!("{f:?}"))
            );
        }
        for d in &plan.deferred {
            let _ = writeln!(s, "  defer claim {}: {}", d.claim, d.reason);
        }
    }
    let _ = writeln!(
        s,
        "\n{planned} planned, {refused} refused ({} StatefulSet(s) desired)",
        outcomes.len()
    );
    s
}

/// The plan as the shell script that carries it out by hand (`commands::script`, shared with
/// the service's failure hints).
fn render_commands(outcomes: &[Outcome], wait_timeout: Duration) -> anyhow::Result<String> {
    let planned: Vec<Planned<'_>> = outcomes
        .iter()
        .map(|o| Planned {
            desired: &o.desired,
            live_uid: o.live_uid.as_deref(),
            result: &o.result,
        })
        .collect();
    Ok(commands::script(&planned, wait_timeout)?)
}
