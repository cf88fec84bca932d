//! How fast the pure core is: quantity parsing/comparison, and `decide` over a large namespace
//! (many claims), since the converger runs it for every StatefulSet of every revision.
//! Run with `cargo bench --bench quantity`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use flux_converger::decide::decide;
use flux_converger::quantity::Quantity;
use serde_json::json;

fn quantities(c: &mut Criterion) {
    let inputs = [
        "1Gi",
        "1024Mi",
        "1.5Gi",
        "500m",
        "1.073741824G",
        "15e-1",
        "9223372036854775807",
        "0.1n",
    ];
    c.bench_function("quantity/parse 8 spellings", |b| {
        b.iter(|| {
            for s in inputs {
                black_box(Quantity::parse(black_box(s)).ok());
            }
        })
    });
    let a = Quantity::parse("1Gi").ok();
    let b_ = Quantity::parse("1.073741824G").ok();
    c.bench_function("quantity/compare", |b| {
        b.iter(|| black_box(&a).cmp(black_box(&b_)))
    });
}

fn decide_many_claims(c: &mut Criterion) {
    let template = |name: &str, size: &str| {
        json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
            "resources": {"requests": {"storage": size}}}})
    };
    let sts = |size: &str| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"serviceName": "web", "replicas": 1000, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}},
                "volumeClaimTemplates": [template("data", size), template("logs", size)]}})
    };
    let (Ok(desired), Ok(live)) = (
        serde_json::from_value(sts("2Gi")),
        serde_json::from_value(sts("1Gi")),
    ) else {
        return;
    };
    let claims: Vec<_> = (0..2000)
        .filter_map(|i| {
            let t = if i % 2 == 0 { "data" } else { "logs" };
            serde_json::from_value(json!({"metadata": {"name": format!("{t}-web-{}", i / 2), "namespace": "default"},
                "spec": {"storageClassName": "expandable", "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Bound"}}))
            .ok()
        })
        .collect();
    let classes: Vec<_> = serde_json::from_value(json!([{"metadata": {"name": "expandable"}, "provisioner": "x", "allowVolumeExpansion": true}]))
        .unwrap_or_default();
    c.bench_function("decide/2 templates, 2000 claims", |b| {
        b.iter(|| {
            black_box(decide(&desired, Some(&live), &claims, &classes).map(|p| p.resize.len()))
        })
    });
}

criterion_group!(benches, quantities, decide_many_claims);
criterion_main!(benches);
