//! Resolve+render of a 2,000-object revision (200 files x 10 objects, `${VAR}` sizes) against the
//! bare kustomize build of the same tree, and the converger's own stages on their own so its
//! overhead can be read apart from kubectl's (noisy on a shared machine).
//! Peak memory: `hack/render-bench.sh`.

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use flux_converger::flux::artifact::{self, FetchOptions, Fetcher};
use flux_converger::flux::objects::{KustomizationSpec, PostBuild};
use flux_converger::flux::render::{self, KustomizeCommand, Owner, RenderRequest, postbuild};
use flux_converger::flux::substitute::Variables;

const FILES: usize = 200;
const PER_FILE: usize = 10;

fn file_text(f: usize) -> String {
    let mut out = String::new();
    for o in 0..PER_FILE {
        if o == 0 {
            out.push_str(&format!(
                "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db-{f}\n  labels: {{app: db-{f}}}\nspec:\n  serviceName: db-{f}\n  replicas: 1\n  selector: {{matchLabels: {{app: db-{f}}}}}\n  template:\n    metadata: {{labels: {{app: db-{f}}}}}\n    spec:\n      containers:\n        - name: db\n          image: postgres:16\n  volumeClaimTemplates:\n    - metadata: {{name: data}}\n      spec:\n        accessModes: [ReadWriteOnce]\n        resources:\n          requests:\n            storage: ${{DB_SIZE}}\n"
            ));
        } else {
            out.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-{f}-{o}\ndata:\n  size: \"${{DB_SIZE}}\"\n  owner: team-{f}\n  note: \"object {o} of file {f}\"\n"
            ));
        }
    }
    out
}

/// The tree as a Flux artifact (root `.`, zero times, 0750/0600).
fn artifact_bytes() -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    let dir = |name: &str| {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o750);
        h.set_mtime(0);
        h.set_size(0);
        h.set_cksum();
        h
    };
    let root = dir(".");
    b.append(&root, std::io::empty()).unwrap();
    let apps = dir("apps");
    b.append(&apps, std::io::empty()).unwrap();
    for f in 0..FILES {
        let text = file_text(f);
        let mut h = tar::Header::new_ustar();
        h.set_path(format!("apps/app-{f:03}.yaml")).unwrap();
        h.set_mode(0o600);
        h.set_mtime(0);
        h.set_size(text.len() as u64);
        h.set_cksum();
        b.append(&h, text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn spec() -> KustomizationSpec {
    KustomizationSpec {
        path: Some("./apps".into()),
        target_namespace: Some("bench".into()),
        post_build: Some(PostBuild {
            substitute: [("DB_SIZE".to_string(), "10Gi".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn write_tree(root: &Path) {
    std::fs::create_dir_all(root.join("apps")).unwrap();
    for f in 0..FILES {
        std::fs::write(root.join(format!("apps/app-{f:03}.yaml")), file_text(f)).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    flux_converger::tls::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let data = artifact_bytes();
    let digest = artifact::digest_of(artifact::Algorithm::Sha256, &data).to_string();
    let kustomize = KustomizeCommand::default();
    let spec = spec();
    let vars: Variables = spec.post_build.as_ref().unwrap().substitute.clone();
    let owner = Owner {
        name: "bench",
        namespace: "flux-system",
        spec: &spec,
    };

    // A local source-controller stand-in serving the artifact.
    let url = rt.block_on(async {
        let body = bytes::Bytes::from(data.clone());
        let app = axum::Router::new().route(
            "/artifact.tar.gz",
            axum::routing::get(move || {
                let body = body.clone();
                async move { body }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/artifact.tar.gz")
    });
    let fetcher = Fetcher::new(FetchOptions::default()).unwrap();

    // The bare build's tree: the same kustomization file (generated list + spec overlay)
    // already written, so both sides ask kustomize for the same work.
    let bare = tempfile::tempdir().unwrap();
    write_tree(bare.path());
    render::prepare(bare.path(), &spec).unwrap();
    let built = rt
        .block_on(kustomize.build(&bare.path().join("apps"), "./apps"))
        .unwrap();

    let mut g = c.benchmark_group("render_2000_objects");
    g.sample_size(10);
    g.bench_function("kustomize_build_only", |b| {
        b.iter(|| {
            rt.block_on(kustomize.build(&bare.path().join("apps"), "./apps"))
                .unwrap()
        })
    });
    g.bench_function("fetch_and_render", |b| {
        b.iter(|| {
            rt.block_on(async {
                let unpacked = fetcher.fetch(&url, &digest).await.unwrap();
                let rendered = render::render(&RenderRequest {
                    root: unpacked.root(),
                    owner: owner.clone(),
                    variables: &vars,
                    strict: true,
                    kustomize: &kustomize,
                })
                .await
                .unwrap();
                assert_eq!(rendered.objects.len(), FILES * PER_FILE);
                render::to_yaml_stream(&rendered.objects).unwrap()
            })
        })
    });
    // The converger's own stages, without kubectl.
    g.bench_function("own/fetch_verify_untar", |b| {
        b.iter(|| rt.block_on(fetcher.fetch(&url, &digest)).unwrap())
    });
    g.bench_function("own/generator_and_overlay", |b| {
        b.iter_batched(
            || {
                let d = tempfile::tempdir().unwrap();
                write_tree(d.path());
                d
            },
            |d| render::prepare(d.path(), &spec).unwrap(),
            criterion::BatchSize::PerIteration,
        )
    });
    g.bench_function("own/substitute_and_labels", |b| {
        b.iter(|| {
            let objects = postbuild::substitute_built(&built, &owner, &vars, true).unwrap();
            postbuild::post_build(objects, &owner).unwrap()
        })
    });
    let rendered = {
        let objects = postbuild::substitute_built(&built, &owner, &vars, true).unwrap();
        postbuild::post_build(objects, &owner).unwrap()
    };
    g.bench_function("own/yaml_output", |b| {
        b.iter(|| render::to_yaml_stream(&rendered).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
