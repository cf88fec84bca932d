//! The service's journal (`journal::watched`): a converge's load of its intent is answered
//! from the watch of the intents only where the watch cannot be missing one, against the fake
//! API server over HTTP.

use test_support::intent as intent_fixture;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::journal::watched::{IntentCache, WatchedJournal};
use flux_converger::journal::{ConfigMapJournal, Journal, intent_configmap_name};
use intent_fixture::intent;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;

const NS: &str = "flux-system";
const T: Duration = Duration::from_secs(5);

/// GETs of intent Secrets the server has seen.
fn reads(fake: &FakeApiServer) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.method == http::Method::GET && r.path.contains("/secrets/flux-converger-intent.")
        })
        .count()
}

/// The intent Secret as the server holds it (what a watch event carries).
fn stored(fake: &FakeApiServer, name: &str) -> Secret {
    let value = fake
        .get(
            "v1",
            "Secret",
            Some(NS),
            &intent_configmap_name("default", name),
        )
        .expect("the intent is stored");
    serde_json::from_value(value).unwrap()
}

/// Each step against one journal whose watch is driven by hand, with what the load answers
/// and whether it asked the server.
#[tokio::test]
async fn a_load_is_answered_from_the_watch_only_where_it_cannot_miss_an_intent() {
    let fake = FakeApiServer::new();
    let plain = ConfigMapJournal::new(fake.client(), NS, T);
    let (store, mut writer) = reflector::store::<Secret>();
    let cache = IntentCache::over(store.clone(), NS);
    let journal = WatchedJournal::new(plain.clone(), Some(cache.clone()));
    let load = |name: &'static str| {
        let journal = &journal;
        let fake = &fake;
        async move {
            let before = reads(fake);
            let found = journal.load("default", name).await.unwrap();
            (found.map(|i| i.name), reads(fake) > before)
        }
    };

    // Not listed yet: the server is asked.
    assert_eq!(load("web").await, (None, true), "before the watch listed");
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    assert!(ready(&store));
    assert_eq!(load("web").await, (None, false), "listed, none there");

    // Another process records one; until the watch shows it, it is missed (the lag a read
    // made a moment earlier has too); once shown, the server is read.
    plain.record(&intent("db")).await.unwrap();
    writer.apply_watcher_event(&watcher::Event::Apply(stored(&fake, "db")));
    assert_eq!(
        load("db").await,
        (Some("db".into()), true),
        "the watch shows one"
    );

    // Shown by the watch but gone from the server: the server's answer is taken.
    let stale = stored(&fake, "db");
    plain.clear("default", "db").await.unwrap();
    assert_eq!(
        load("db").await,
        (None, true),
        "a stale copy starts no resume"
    );
    writer.apply_watcher_event(&watcher::Event::Delete(stale));
    assert_eq!(load("db").await, (None, false), "deleted in the watch too");

    // This process's own record, not yet in the watch (a converge that failed after it):
    // read from the server until it is cleared.
    journal.record(&intent("web")).await.unwrap();
    assert_eq!(
        load("web").await,
        (Some("web".into()), true),
        "our own record"
    );
    journal.clear("default", "web").await.unwrap();
    assert_eq!(load("web").await, (None, false), "cleared by us");

    // Without a cache, the journal itself.
    let uncached = WatchedJournal::new(plain.clone(), None);
    let before = reads(&fake);
    assert!(uncached.load("default", "web").await.unwrap().is_none());
    assert_eq!(reads(&fake), before + 1);

    // A journal in another namespace than the watch's is not answered from it.
    let elsewhere = WatchedJournal::new(
        ConfigMapJournal::new(fake.client(), "other", T),
        Some(cache),
    );
    let before = fake.requests().len();
    assert!(elsewhere.load("default", "web").await.unwrap().is_none());
    assert_eq!(fake.requests().len(), before + 1);
}

fn ready(store: &Store<Secret>) -> bool {
    use futures::FutureExt as _;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// The watch itself: listed, it answers for what is absent and sends every intent it sees
/// to the server; a record by another process reaches it.
#[tokio::test]
async fn the_watch_follows_every_shards_intents() {
    let fake = FakeApiServer::new();
    let (cache, watch) = IntentCache::watch(fake.client(), NS);
    let task = tokio::spawn(watch);
    let journal = WatchedJournal::new(ConfigMapJournal::new(fake.client(), NS, T), Some(cache));
    // Recorded by another shard's leader (labelled with its shard), then by the command.
    let shard = flux_converger::journal::Shard::Named("flux-converger-3d8dfb26".into());
    ConfigMapJournal::new(fake.client(), NS, T)
        .scoped(shard)
        .record(&intent("db"))
        .await
        .unwrap();
    ConfigMapJournal::new(fake.client(), NS, T)
        .record(&intent("web"))
        .await
        .unwrap();
    // Observed, not timed: until the watch has listed and shown both, loads go to the server,
    // so each is found either way; then an absent one costs nothing.
    for name in ["db", "web"] {
        let found = journal.load("default", name).await.unwrap();
        assert_eq!(found.map(|i| i.name).as_deref(), Some(name));
    }
    let mut quiet = false;
    for _ in 0..500 {
        let before = reads(&fake);
        assert!(journal.load("default", "cache").await.unwrap().is_none());
        if reads(&fake) == before {
            quiet = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(quiet, "the watch never answered for an absent intent");
    for name in ["db", "web"] {
        let before = reads(&fake);
        let found = journal.load("default", name).await.unwrap();
        assert_eq!(found.map(|i| i.name).as_deref(), Some(name));
        assert_eq!(reads(&fake), before + 1, "{name} is read from the server");
    }
    task.abort();
}
