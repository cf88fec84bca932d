//! Cost of post-build substitution on a revision the size of the render benchmark (2,000
//! objects): the whole `kustomize build` stream substituted per object, against only
//! splitting and parsing it, so the substitution's own share is visible.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use flux_converger::flux::substitute::{
    Options, Variables, envsubst, split_documents, substitute_stream,
};

fn stream(objects: usize) -> String {
    let mut out = String::new();
    for i in 0..objects {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web-{i}\n  namespace: ${{NS:=apps}}\n  labels:\n    app.kubernetes.io/name: web-{i}\n    env: ${{ENV,,}}\nspec:\n  replicas: ${{REPLICAS}}\n  serviceName: web-{i}\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: web-{i}\n  template:\n    metadata:\n      labels:\n        app.kubernetes.io/name: web-{i}\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/example/app:${{TAG##*:}}\n        command:\n        - sh\n        - -c\n        - |\n          echo \"$${{HOME}}\" starting ${{ENV}}\n          exec app --size=${{SIZE}}\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources:\n        requests:\n          storage: ${{SIZE}}\n"
        ));
    }
    out
}

fn vars() -> Variables {
    [
        ("ENV", "Production"),
        ("REPLICAS", "3"),
        ("TAG", "registry:1.2.3"),
        ("SIZE", "20Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn bench(c: &mut Criterion) {
    let text = stream(2000);
    let vars = vars();
    let options = Options::default();
    let one = split_documents(&text)[0].to_owned();

    c.bench_function("envsubst one object", |b| {
        b.iter(|| envsubst(black_box(&one), &vars, true))
    });
    c.bench_function("parse only, 2000 objects", |b| {
        b.iter(|| {
            split_documents(black_box(&text))
                .into_iter()
                .map(serde_saphyr::from_str::<serde_json::Value>)
                .collect::<Result<Vec<_>, _>>()
        })
    });
    c.bench_function("substitute_stream, 2000 objects", |b| {
        b.iter(|| substitute_stream(black_box(&text), &vars, &options))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
