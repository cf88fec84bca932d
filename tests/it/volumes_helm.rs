//! The one claim follower serves HelmReleases as it serves Kustomizations (issue #40): a
//! wedged HelmRelease converged from its release record has its grown claims followed, the
//! states written into the HelmRelease's own record, `VolumesGrown` published on the
//! HelmRelease. The world is the HelmRelease tests' (`helm_service::world`).

use std::time::Duration;

use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::model::{GateMode, GateOutcome, Kind, RevisionState, Trigger, VolumeState};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::{Results, Shard};
use flux_converger::service::gate::{Gate, GateConfig};
use flux_converger::service::helmrelease::{HelmConfig, HelmGate};
use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
use test_support::resizer::Resizer;

const NS: &str = "demo";
const SERVICE_NS: &str = "flux-system";
const T: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helmreleases_grown_claims_are_followed_into_its_own_record() {
    let fake = super::helm_service::world().await;
    let events = EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap();
    let ks_results = Results::new(fake.client(), SERVICE_NS.into(), T);
    let hr_results = Results::of_kind(
        fake.client(),
        SERVICE_NS.into(),
        T,
        Shard::Unsharded,
        Kind::HELM_RELEASE,
    );
    let follower = VolumeFollower::new(FollowerConfig {
        client: fake.client(),
        results: vec![
            (Kind::KUSTOMIZATION, ks_results.clone()),
            (Kind::HELM_RELEASE, hr_results.clone()),
        ],
        events: events.clone(),
        metrics: Metrics::default(),
        resize_timeout: Duration::from_secs(1800),
        call_timeout: T,
        statefulsets: None,
        restart_retry: Duration::from_secs(10),
    });
    let gate = Gate::standalone(GateConfig {
        client: fake.client(),
        namespace: SERVICE_NS.into(),
        resolver: Resolver {
            client: fake.client(),
            fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
            kustomize: KustomizeCommand::default(),
            strict: true,
            allow_cross_namespace: true,
        },
        results: ks_results,
        metrics: Metrics::default(),
        handoff_timeout: Duration::from_secs(60),
        call_timeout: T,
        default_service_account: None,
        events: events.clone(),
        default_gate: GateMode::Off,
    });
    let gate = gate
        .clone()
        .with_step(gate.step().clone().with_volumes(follower));
    let helm = HelmGate::new(
        HelmConfig {
            client: fake.client(),
            results: hr_results.clone(),
            events,
            call_timeout: T,
            handoff_timeout: Duration::from_secs(60),
            default_service_account: None,
            max_decoded_bytes: 1 << 20,
        },
        gate.step().clone(),
    );
    assert_eq!(
        helm.run(NS, "web", Trigger::Watch).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    let record = hr_results.last(NS, "web").unwrap();
    let volumes = &record.statefulsets[0].volumes;
    assert_eq!(volumes.len(), 2, "{record:#?}");
    assert!(volumes.iter().all(|v| v.state == VolumeState::Requested));

    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    for i in 0..2 {
        resizer.finish(NS, &format!("data-web-{i}")).await.unwrap();
    }
    let grown = || {
        hr_results
            .last(NS, "web")
            .and_then(|r| r.volumes)
            .is_some_and(|s| s.all_grown())
    };
    for _ in 0..500 {
        if grown() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(grown(), "{:#?}", hr_results.last(NS, "web"));
    let published = || {
        fake.list("events.k8s.io/v1", "Event", Some(NS))
            .into_iter()
            .any(|e| e["reason"] == "VolumesGrown" && e["regarding"]["kind"] == "HelmRelease")
    };
    for _ in 0..500 {
        if published() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(published(), "VolumesGrown on the HelmRelease");
}
