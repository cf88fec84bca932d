//! A set of StatefulSets (one revision, one file) converged all or nothing: every one is
//! prepared before any is written, and one refused or failed holds the rest.

use std::sync::atomic::Ordering;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use tracing::info;

use super::desired::{clean_desired, identity};
use super::error::ConvergeError;
use super::options::Options;
use super::report::{ClaimAction, Outcome, Report, ResumeAction, ResumeReport, Step};
use super::resume::Skipped;
use super::run::Run;
use super::work::{Prep, Work};
use crate::cluster::Cluster;
use crate::journal::{Journal, Unreadable};

/// One StatefulSet after the write-free phase: the work left for the write phase, if any.
struct Prepared<'a, C, J> {
    run: Run<'a, C, J>,
    desired: StatefulSet,
    report: Report,
    work: Option<Work>,
}

/// The write-free phase of one StatefulSet: finish an earlier intent for it (that intent's
/// own work, decided before this converge), read, decide, prove, pre-flight.
async fn prepare_one<'a, C: Cluster, J: Journal>(
    cluster: &'a C,
    journal: &'a J,
    desired: &StatefulSet,
    options: &'a Options,
) -> Result<Prepared<'a, C, J>, ConvergeError> {
    let (namespace, name) = identity(desired)?;
    let run = Run::new(cluster, journal, &namespace, &name, options);
    let mut report = Report::new(&namespace, &name, options.dry_run);
    let desired = clean_desired(desired);

    let t = Instant::now();
    if options.dry_run {
        // Only say that a real run would first finish an earlier intent.
        match journal.load(&namespace, &name).await {
            Ok(Some(intent)) if run.refusal_of(&intent).is_some() => {
                report.refused_intent = run.refusal_of(&intent);
            }
            Ok(found) => {
                report.resumed = found.map(|intent| ResumeReport {
                    action: ResumeAction::Pending,
                    recorded_uid: intent.uid,
                    recorded_at: intent.recorded_at,
                    revision: intent.revision,
                    report: None,
                });
            }
            Err(e) => match Unreadable::of(&e) {
                Some(unreadable) => report.unreadable_intent = Some(unreadable),
                None => return Err(run.journal_err(Step::Resume)(e)),
            },
        }
    } else {
        match run.resume().await? {
            Ok(resumed) => report.resumed = resumed,
            Err(Skipped::Unreadable(unreadable)) => report.unreadable_intent = Some(unreadable),
            Err(Skipped::Refused(refused)) => report.refused_intent = Some(refused),
        }
    }
    report.timed(Step::Resume, t.elapsed());

    // A watched copy is decided on only where no resume just changed the object.
    let t = Instant::now();
    let watched = if report.resumed.is_none() {
        cluster.watched_statefulset(&namespace, &name)
    } else {
        None
    };
    let mut from_watch = watched.is_some();
    let mut live = match watched {
        Some(copy) => Some(copy),
        None => cluster
            .get_statefulset(&namespace, &name)
            .await
            .map_err(run.call_err(Step::Read))?,
    };
    report.timed(Step::Read, t.elapsed());
    let work = loop {
        let Some(object) = live else {
            report.outcome = Outcome::Absent;
            break None;
        };
        match run
            .prepare(&desired, object, from_watch, &mut report, None)
            .await?
        {
            Prep::Work(work) => break work,
            Prep::Stale => {
                from_watch = false;
                let t = Instant::now();
                live = cluster
                    .get_statefulset(&namespace, &name)
                    .await
                    .map_err(run.call_err(Step::Read))?;
                report.timed(Step::Read, t.elapsed());
            }
        }
    };
    Ok(Prepared {
        run,
        desired,
        report,
        work,
    })
}

/// The write phase of one prepared StatefulSet, then the intent cleared.
async fn write_one<C: Cluster, J: Journal>(
    prepared: Prepared<'_, C, J>,
) -> Result<Report, ConvergeError> {
    let Prepared {
        run,
        desired,
        mut report,
        work,
    } = prepared;
    if let Some(work) = work {
        run.write(&desired, work, &mut report, None).await?;
    }
    if run.intent_kept.load(Ordering::SeqCst) {
        let t = Instant::now();
        run.clear().await?;
        report.timed(Step::Clear, t.elapsed());
    }
    Ok(report)
}

/// "not written: StatefulSet NS/NAME of the same revision was refused" (or "failed").
fn held_message(desired: &StatefulSet, what: &str) -> String {
    format!(
        "not written: StatefulSet {}/{} of the same revision {what}",
        desired.metadata.namespace.as_deref().unwrap_or_default(),
        desired.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A prepared report turned into "held": what it planned stays in it, but no claim reads as
/// grown (nothing was written).
fn held(mut report: Report, why: &str) -> Report {
    info!(statefulset = %report.name, namespace = %report.namespace, reason = why, "held");
    report.outcome = Outcome::Held;
    report.held_by = Some(why.to_string());
    report.volumes.clear();
    for c in &mut report.claims {
        if c.action == ClaimAction::Resized {
            c.action = ClaimAction::WouldResize;
        }
        if c.action == ClaimAction::Modified {
            c.action = ClaimAction::WouldModify;
        }
    }
    report
}

/// Converges a set of StatefulSets (one revision, one file) all or nothing: each is first
/// prepared (an earlier intent for it finished, read, decided, proven, pre-flighted); if any
/// is refused or fails there, none is written and every other one is [`Outcome::Held`].
/// Otherwise each is written in turn; if one's writes fail, the ones not yet started are held
/// and its error is returned in its place. One result per desired object, in order.
pub async fn converge_all<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    desired: &[StatefulSet],
    options: &Options,
) -> Vec<Result<Report, ConvergeError>> {
    use tracing::Instrument as _;
    let spans: Vec<tracing::Span> = desired.iter().map(statefulset_span).collect();
    let mut prepared = Vec::with_capacity(desired.len());
    for (d, span) in desired.iter().zip(&spans) {
        prepared.push(
            prepare_one(cluster, journal, d, options)
                .instrument(span.clone())
                .await,
        );
    }
    let blocker = prepared.iter().zip(desired).find_map(|(p, d)| match p {
        Err(_) => Some(held_message(d, "failed")),
        Ok(p) if p.report.outcome == Outcome::Refused => Some(held_message(d, "was refused")),
        Ok(_) => None,
    });
    if let Some(why) = blocker {
        return prepared
            .into_iter()
            .map(|p| match p {
                Err(e) => Err(e),
                Ok(p) if p.report.outcome == Outcome::Refused => Ok(p.report),
                Ok(p) => Ok(held(p.report, &why)),
            })
            .collect();
    }
    let mut results = Vec::with_capacity(prepared.len());
    let mut stopped: Option<String> = None;
    for ((p, d), span) in prepared.into_iter().zip(desired).zip(spans) {
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                results.push(Err(e));
                continue;
            }
        };
        if let Some(why) = &stopped {
            results.push(Ok(held(p.report, why)));
            continue;
        }
        let written = write_one(p).instrument(span).await;
        if written.is_err() {
            stopped = Some(held_message(d, "failed"));
        }
        results.push(written);
    }
    results
}

/// The span one StatefulSet's converge runs in: every event inside it, the wire's request
/// trace included (`crate::wire`), carries `statefulset = namespace/name`.
fn statefulset_span(desired: &StatefulSet) -> tracing::Span {
    let namespace = desired.metadata.namespace.as_deref().unwrap_or_default();
    let name = desired.metadata.name.as_deref().unwrap_or_default();
    tracing::info_span!("converge", statefulset = %format!("{namespace}/{name}"))
}

/// Converges one StatefulSet to `desired` (namespace and name set): first finishes an
/// unfinished intent for it, then decides, proves, pre-flights the re-create and, when there
/// is something to do, grows claims and, when the plan carries an immutable change the server
/// will not take in place, records the intent, orphan-deletes, waits and re-applies. The set of one of [`converge_all`].
///
/// A refusal is a report with [`Outcome::Refused`]: nothing was written for it. A converge
/// with nothing to do writes nothing, not even the journal.
pub async fn converge<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    desired: &StatefulSet,
    options: &Options,
) -> Result<Report, ConvergeError> {
    let one = converge_all(cluster, journal, std::slice::from_ref(desired), options).await;
    // `converge_all` answers once per desired object; the fallback is never reached.
    one.into_iter().next().unwrap_or_else(|| {
        Err(ConvergeError::Invalid {
            what: "StatefulSet".into(),
            message: "the converge returned no result".into(),
        })
    })
}
