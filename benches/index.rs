//! What the service's index holds per Kustomization (issue 36, item 2), printed for the report
//! (not a timed test): the heap the index keeps for N Kustomizations, each reading its own
//! GitRepository (that source's revision known), counted by a global allocator that tracks the
//! bytes live; and the same through a relist (the watch's Init → InitDone, applied as listed),
//! which must keep no more.
//!
//! `cargo bench --bench index` (env `KUSTOMIZATIONS`, default 10,000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use flux_converger::flux::objects::{Kustomization, SourceKind};
use flux_converger::model::GateMode;
use flux_converger::service::index::{Index, SourceKey};
use serde_json::json;

/// The system allocator, counting the bytes live (requested sizes; the allocator's own
/// rounding and headers, ~8-16 bytes a block, come on top).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn kustomization(i: usize) -> Kustomization {
    let namespace = format!("team-{:03}", i / 100);
    let name = format!("app-{i:05}");
    serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"namespace": namespace, "name": name, "generation": 1,
                     "annotations": {"flux-converger.io/gate": "reconcile"}},
        "spec": {"interval": "10m", "path": format!("./apps/{name}"), "prune": true,
                 "sourceRef": {"kind": "GitRepository", "name": name}}
    }))
    .expect("a Kustomization")
}

fn source(i: usize) -> (SourceKey, Option<String>) {
    (
        SourceKey::new(
            SourceKind::GitRepository,
            &format!("team-{:03}", i / 100),
            &format!("app-{i:05}"),
        ),
        Some("main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b".to_string()),
    )
}

fn live() -> (isize, isize) {
    (LIVE.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed))
}

fn main() {
    let n: usize = std::env::var("KUSTOMIZATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let objects: Vec<Kustomization> = (0..n).map(kustomization).collect();
    let (before, blocks_before) = live();
    let mut index = Index::new(GateMode::Off);
    for ks in &objects {
        index.apply_kustomization(ks);
    }
    for i in 0..n {
        let (key, revision) = source(i);
        index.apply_source(key, revision);
    }
    let (after, blocks_after) = live();
    let per = (after - before) as f64 / n as f64;
    let blocks = (blocks_after - blocks_before) as f64 / n as f64;
    println!(
        "index: {n} Kustomizations, each its own GitRepository: {per:.0} bytes and {blocks:.1} allocations per Kustomization ({:.1} MB)",
        (after - before) as f64 / 1e6
    );
    // A relist of both, applied as listed: nothing more is kept afterwards.
    let relist = index.begin_relist();
    for ks in &objects {
        index.apply_kustomization(ks);
    }
    index.end_kustomization_relist(relist);
    let sources = index.begin_source_relist();
    for i in 0..n {
        let (key, revision) = source(i);
        index.apply_listed_source(key, revision, sources);
    }
    index.end_source_relist(SourceKind::GitRepository, None, sources);
    let (relisted, _) = live();
    println!(
        "after a relist of both: {:.0} bytes per Kustomization",
        (relisted - before) as f64 / n as f64
    );
    assert_eq!(index.handled_count(), n);
}
