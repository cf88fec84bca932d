//! The restart's decisions by table: the gates, the order, a decision recorded and finished.

use super::*;

fn volume(claim: &str, state: VolumeState) -> Volume {
    Volume {
        claim: claim.into(),
        requested: Some("2Gi".into()),
        capacity: Some("1Gi".into()),
        state,
        message: None,
        since: "2026-12-01T10:00:00Z".into(),
        attributes: None,
        restart: None,
    }
}

fn restarted(claim: &str, pod: &str, uid: &str, evicted: bool) -> Volume {
    Volume {
        restart: Some(Restart {
            pod: pod.into(),
            uid: uid.into(),
            evicted_at: evicted.then(|| "2026-12-01T10:01:00Z".into()),
        }),
        ..volume(
            claim,
            if evicted {
                VolumeState::Restarted
            } else {
                VolumeState::FilesystemPending
            },
        )
    }
}

fn pod(ordinal: i64, ready: bool) -> PodView {
    PodView {
        name: format!("db-{ordinal}"),
        uid: format!("uid-{ordinal}"),
        ready,
        deleting: false,
    }
}

fn set(pods: Vec<PodView>) -> SetView {
    SetView {
        opted_in: true,
        replicas: 3,
        start: 0,
        current_revision: Some("db-1".into()),
        update_revision: Some("db-1".into()),
        pods,
    }
}

fn ready() -> Vec<PodView> {
    (0..3).map(|o| pod(o, true)).collect()
}

fn evict(ordinal: i64, claims: &[&str]) -> Next {
    Next::Evict {
        pod: format!("db-{ordinal}"),
        uid: format!("uid-{ordinal}"),
        claims: claims.iter().map(|c| c.to_string()).collect(),
    }
}

fn waits(words: &'static str) -> impl Fn(&Next) -> bool {
    move |n| matches!(n, Next::Wait(why) if why.contains(words))
}

#[test]
fn claims_name_their_ordinal() {
    for (claim, set, ordinal) in [
        ("data-db-0", "db", Some(0)),
        ("data-db-12", "db", Some(12)),
        ("logs-web-db-3", "web-db", Some(3)),
        ("data-web-db-3", "db", Some(3)),
        ("data-db-x", "db", None),
        ("db-0", "db", None),
        ("data-other-1", "db", None),
    ] {
        assert_eq!(claim_ordinal(claim, set), ordinal, "{claim} of {set}");
    }
}

#[test]
fn only_the_annotation_set_to_true_opts_in() {
    let with = |v: &str| {
        let mut a = std::collections::BTreeMap::new();
        a.insert(ANNOTATION.to_string(), v.to_string());
        a
    };
    assert!(opted_in(Some(&with("true"))));
    for v in ["false", "True", "yes", ""] {
        assert!(!opted_in(Some(&with(v))), "{v:?}");
    }
    assert!(!opted_in(None));
}

#[test]
fn the_next_step_by_table() {
    use VolumeState::*;
    type Check = Box<dyn Fn(&Next) -> bool>;
    let is = |want: Next| -> Check { Box::new(move |n| *n == want) };
    let cases: Vec<(&str, SetView, Vec<Volume>, Check)> = vec![
        (
            "not opted in: never",
            SetView {
                opted_in: false,
                ..set(ready())
            },
            vec![volume("data-db-2", FilesystemPending)],
            is(Next::Idle),
        ),
        (
            "nothing filesystem-pending",
            set(ready()),
            vec![volume("data-db-2", Grown), volume("data-db-1", Grown)],
            is(Next::Idle),
        ),
        (
            "the highest ordinal first, with every claim of that pod",
            set(ready()),
            vec![
                volume("data-db-0", FilesystemPending),
                volume("data-db-2", FilesystemPending),
                volume("logs-db-2", FilesystemPending),
                volume("data-db-1", Grown),
            ],
            is(evict(2, &["data-db-2", "logs-db-2"])),
        ),
        (
            "a claim still resizing holds every restart",
            set(ready()),
            vec![
                volume("data-db-2", FilesystemPending),
                volume("data-db-1", Resizing),
            ],
            Box::new(waits("claim data-db-1 is resizing")),
        ),
        (
            "an infeasible claim holds them too",
            set(ready()),
            vec![
                volume("data-db-2", FilesystemPending),
                volume("data-db-0", Infeasible),
            ],
            Box::new(waits("data-db-0 is infeasible")),
        ),
        (
            "a pod not Ready holds them",
            set(vec![pod(0, true), pod(1, false), pod(2, true)]),
            vec![volume("data-db-2", FilesystemPending)],
            Box::new(waits("pod db-1 is not Ready")),
        ),
        (
            "a pod missing holds them",
            set(vec![pod(0, true), pod(2, true)]),
            vec![volume("data-db-2", FilesystemPending)],
            Box::new(waits("pod db-1 does not exist")),
        ),
        (
            "a pod terminating holds them",
            set(vec![
                pod(0, true),
                PodView {
                    deleting: true,
                    ..pod(1, true)
                },
                pod(2, true),
            ]),
            vec![volume("data-db-2", FilesystemPending)],
            Box::new(waits("pod db-1 is terminating")),
        ),
        (
            "a rolling update holds them",
            SetView {
                update_revision: Some("db-2".into()),
                ..set(ready())
            },
            vec![volume("data-db-2", FilesystemPending)],
            Box::new(waits("rolling update is in progress")),
        ),
        (
            "a claim of an ordinal scaled away has no pod to restart",
            SetView {
                replicas: 2,
                ..set(vec![pod(0, true), pod(1, true)])
            },
            vec![
                volume("data-db-2", FilesystemPending),
                volume("data-db-0", FilesystemPending),
            ],
            is(evict(0, &["data-db-0"])),
        ),
        (
            "a restart recorded and not sent is sent again, under its uid",
            set(ready()),
            vec![
                restarted("data-db-2", "db-2", "uid-2", false),
                volume("data-db-1", FilesystemPending),
            ],
            is(evict(2, &["data-db-2"])),
        ),
        (
            "a restart recorded waits for the gates like any",
            set(vec![pod(0, false), pod(1, true), pod(2, true)]),
            vec![restarted("data-db-2", "db-2", "uid-2", false)],
            Box::new(waits("pod db-0 is not Ready")),
        ),
        (
            "a restart recorded whose pod was replaced was evicted",
            set(vec![
                pod(0, true),
                pod(1, true),
                PodView {
                    uid: "uid-2b".into(),
                    ..pod(2, true)
                },
            ]),
            vec![restarted("data-db-2", "db-2", "uid-2", false)],
            is(Next::Evicted {
                pod: "db-2".into(),
                claims: vec!["data-db-2".into()],
            }),
        ),
        (
            "a restart recorded whose pod is gone was evicted",
            set(vec![pod(0, true), pod(1, true)]),
            vec![restarted("data-db-2", "db-2", "uid-2", false)],
            is(Next::Evicted {
                pod: "db-2".into(),
                claims: vec!["data-db-2".into()],
            }),
        ),
        (
            "a pod evicted and not back: the next waits",
            set(vec![pod(0, true), pod(1, true)]),
            vec![
                restarted("data-db-2", "db-2", "uid-2", true),
                volume("data-db-1", FilesystemPending),
            ],
            Box::new(waits("pod db-2 was evicted; waiting for it to be back")),
        ),
        (
            "a pod back and Ready whose claim has not grown: the next waits",
            set(vec![
                pod(0, true),
                pod(1, true),
                PodView {
                    uid: "uid-2b".into(),
                    ..pod(2, true)
                },
            ]),
            vec![
                restarted("data-db-2", "db-2", "uid-2", true),
                volume("data-db-1", FilesystemPending),
            ],
            Box::new(waits("waiting for claim data-db-2 to grow")),
        ),
        (
            "its claim grown: the next pod",
            set(ready()),
            vec![
                volume("data-db-2", Grown),
                volume("data-db-1", FilesystemPending),
                volume("data-db-0", FilesystemPending),
            ],
            is(evict(1, &["data-db-1"])),
        ),
    ];
    for (name, view, volumes, check) in cases {
        let got = next("db", &view, &volumes);
        assert!(check(&got), "{name}: {got:?}");
    }
}
