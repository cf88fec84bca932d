//! N Kustomizations rendering one source revision: how many times the upstream is asked and
//! how many bytes it sends, with the service's artifact store (`--storage-path`) and without
//! (every render downloads to a temporary file, as `render` does). Each wave runs N fetches
//! (download + verify + unpack) at once, as N workers would, against a local stand-in for
//! source-controller; wall time per wave is printed too (noisy on a shared machine: the counts
//! are the figure).
//!
//! `cargo bench --bench downloads` (prints a table; not a criterion bench).

use test_support::flux_archive;

use std::time::Instant;

use flux_archive::{ArtifactServer, flux_artifact, sha256};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::storage::{Storage, StorageConfig};

/// 200 files of ten objects each: the size of hack/render-bench.sh's revision.
fn revision() -> Vec<u8> {
    let texts: Vec<(String, String)> = (0..200)
        .map(|f| {
            let body: String = (0..10)
                .map(|o| {
                    format!(
                        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-{f}-{o}\ndata:\n  note: \"object {o} of file {f}, {}\"\n",
                        "padding ".repeat(8)
                    )
                })
                .collect();
            (format!("apps/file-{f:03}.yaml"), body)
        })
        .collect();
    let files: Vec<(&str, &str)> = texts
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    flux_artifact(&files)
}

async fn wave(fetcher: &Fetcher, url: &str, digest: &str, n: usize) -> std::time::Duration {
    let started = Instant::now();
    let fetches = (0..n).map(|_| fetcher.fetch(url, digest));
    for unpacked in futures::future::join_all(fetches).await {
        let unpacked = unpacked.expect("fetch");
        assert_eq!(unpacked.stats.files, 200);
    }
    started.elapsed()
}

fn main() {
    flux_converger::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let data = revision();
        let digest = sha256(&data);
        println!(
            "artifact: {} bytes (200 files x 10 objects); 2 waves of N concurrent renders",
            data.len()
        );
        println!(
            "{:>5} {:>13} {:>14} {:>16} {:>16} {:>16}",
            "N", "store", "upstream hits", "upstream bytes", "wave 1 ms", "wave 2 ms"
        );
        for n in [1usize, 10, 50] {
            for with_store in [false, true] {
                let upstream = ArtifactServer::start().await;
                let url = upstream.put("gitrepository/apps/repo/rev.tar.gz", data.clone());
                let dir = tempfile::tempdir().expect("tempdir");
                let fetcher = if with_store {
                    let config = StorageConfig {
                        path: Some(dir.path().to_path_buf()),
                        ..StorageConfig::default()
                    };
                    Storage::open(&config, FetchOptions::default())
                        .expect("storage")
                        .fetcher()
                } else {
                    Fetcher::new(FetchOptions::default()).expect("fetcher")
                };
                let first = wave(&fetcher, &url, &digest, n).await;
                let second = wave(&fetcher, &url, &digest, n).await;
                let hits = upstream.requests().len();
                println!(
                    "{:>5} {:>13} {:>14} {:>16} {:>16.1} {:>16.1}",
                    n,
                    if with_store { "yes" } else { "no" },
                    hits,
                    hits * data.len(),
                    first.as_secs_f64() * 1000.0,
                    second.as_secs_f64() * 1000.0
                );
            }
        }
    });
}
