//! Fetching artifacts from a local stand-in for source-controller: digests, caps, a single
//! attempt per fetch (retries are the service queue's), 404, host rewrite, and every kind of
//! hostile archive.

use test_support::flux_archive;

use std::time::Duration;

use flux_archive::{ArtifactServer, Entry, declared_only_tar_gz, flux_artifact, sha256, tar_gz};
use flux_converger::flux::artifact::{
    Algorithm, ArtifactError, FetchOptions, Fetcher, UnpackLimits, digest_of, unpack_file,
};

fn fetcher(options: FetchOptions) -> Fetcher {
    flux_converger::tls::install_crypto_provider();
    Fetcher::new(options).unwrap()
}

fn quick() -> FetchOptions {
    FetchOptions {
        timeout: Duration::from_secs(30),
        ..FetchOptions::default()
    }
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

#[tokio::test]
async fn fetches_verifies_and_unpacks_flux_layout() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[
        ("apps/cm.yaml", CM),
        ("apps/sub/x.yml", CM),
        ("README.md", "hi"),
    ]);
    let url = server.put("gitrepository/ns/repo/abc.tar.gz", data.clone());
    let unpacked = fetcher(quick()).fetch(&url, &sha256(&data)).await.unwrap();
    let root = unpacked.root().to_path_buf();
    assert_eq!(
        std::fs::read_to_string(root.join("apps/cm.yaml")).unwrap(),
        CM
    );
    assert_eq!(
        std::fs::read_to_string(root.join("apps/sub/x.yml")).unwrap(),
        CM
    );
    assert_eq!(unpacked.stats.files, 3);
    assert_eq!(unpacked.stats.bytes, (CM.len() * 2 + 2) as u64);
    drop(unpacked);
    assert!(!root.exists(), "the temporary root is removed on drop");
}

#[tokio::test]
async fn every_digest_algorithm_and_bare_hex_verify() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    let url = server.put("a.tar.gz", data.clone());
    let f = fetcher(quick());
    for digest in [
        digest_of(Algorithm::Sha256, &data).to_string(),
        digest_of(Algorithm::Sha384, &data).to_string(),
        digest_of(Algorithm::Sha512, &data).to_string(),
        digest_of(Algorithm::Sha256, &data).hex,
        digest_of(Algorithm::Sha256, &data).hex.to_uppercase(),
    ] {
        f.fetch(&url, &digest)
            .await
            .unwrap_or_else(|e| panic!("{digest}: {e}"));
    }
}

#[tokio::test]
async fn digest_mismatch_names_url_and_both_digests() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    let url = server.put("a.tar.gz", data.clone());
    let wrong = digest_of(Algorithm::Sha512, b"something else").to_string();
    let e = fetcher(quick()).fetch(&url, &wrong).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ArtifactError::DigestMismatch { .. }), "{text}");
    assert!(text.contains(&url) && text.contains(&wrong), "{text}");
    assert!(
        text.contains(&digest_of(Algorithm::Sha512, &data).to_string()),
        "{text}"
    );
    assert!(e.is_bad_input());
}

#[tokio::test]
async fn unknown_digest_algorithm_is_refused_before_downloading() {
    let server = ArtifactServer::start().await;
    let url = server.put("a.tar.gz", flux_artifact(&[("a.yaml", CM)]));
    let e = fetcher(quick())
        .fetch(&url, &format!("md5:{}", "0".repeat(32)))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::BadDigest { .. }), "{e}");
    assert!(
        e.to_string().contains("unsupported algorithm \"md5\""),
        "{e}"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn oversize_is_refused_by_header_and_while_streaming() {
    let server = ArtifactServer::start().await;
    let big = "x".repeat(200_000);
    // Incompressible-ish content so the archive is bigger than the cap.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise: String = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let data = flux_artifact(&[("a.yaml", &big), ("b.txt", &noise)]);
    let url = server.put("big.tar.gz", data.clone());
    let options = FetchOptions {
        max_download_bytes: 10_000,
        ..quick()
    };
    let e = fetcher(options.clone())
        .fetch(&url, &sha256(&data))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("Content-Length"), "{e}");

    *server.state.chunked.lock().unwrap() = true;
    let e = fetcher(options)
        .fetch(&url, &sha256(&data))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::TooLarge { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("maximum download size of 10000 bytes"),
        "{e}"
    );
}

/// One attempt: a 5xx is reported at once as transient (not bad input), and the next fetch
/// (the queue's retry) succeeds.
#[tokio::test]
async fn a_server_error_is_one_transient_attempt() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    let url = server.put("a.tar.gz", data.clone());
    server.fail_first("a.tar.gz", &[503]);
    let f = fetcher(quick());
    let e = f.fetch(&url, &sha256(&data)).await.unwrap_err();
    assert!(matches!(e, ArtifactError::Http { status: 503, .. }), "{e}");
    assert!(e.to_string().contains("HTTP 503"), "{e}");
    assert!(!e.is_bad_input());
    assert_eq!(server.requests().len(), 1);
    f.fetch(&url, &sha256(&data)).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

/// The CLI's `--fetch-retries`: 5xx retried with backoff, then success; a 4xx is not retried.
#[tokio::test]
async fn retries_when_asked_for_then_succeed() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    let url = server.put("a.tar.gz", data.clone());
    server.fail_first("a.tar.gz", &[503, 500]);
    let retrying = FetchOptions {
        retries: 2,
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        ..quick()
    };
    fetcher(retrying.clone())
        .fetch(&url, &sha256(&data))
        .await
        .unwrap();
    assert_eq!(server.requests().len(), 3);
    server.fail_first("a.tar.gz", &[403]);
    let e = fetcher(retrying)
        .fetch(&url, &sha256(&data))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::Http { status: 403, .. }), "{e}");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn connection_refused_is_one_transient_attempt() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/a.tar.gz");
    let e = fetcher(quick())
        .fetch(&url, &sha256(b""))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::Connection { .. }), "{e}");
    assert!(!e.is_bad_input());
}

#[tokio::test]
async fn not_found_is_its_own_error_and_not_retried() {
    let server = ArtifactServer::start().await;
    let e = fetcher(quick())
        .fetch(&server.url("gone.tar.gz"), &sha256(b""))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::NotFound { .. }), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn client_errors_other_than_404_are_not_retried() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    let url = server.put("a.tar.gz", data.clone());
    server.fail_first("a.tar.gz", &[403]);
    let e = fetcher(quick())
        .fetch(&url, &sha256(&data))
        .await
        .unwrap_err();
    assert!(matches!(e, ArtifactError::Http { status: 403, .. }), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn source_controller_localhost_rewrites_the_host() {
    let server = ArtifactServer::start().await;
    let data = flux_artifact(&[("a.yaml", CM)]);
    server.put("gitrepository/ns/r/abc.tar.gz", data.clone());
    let in_cluster =
        "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/r/abc.tar.gz";
    let options = FetchOptions {
        host_override: Some(server.addr.to_string()),
        ..quick()
    };
    fetcher(options)
        .fetch(in_cluster, &sha256(&data))
        .await
        .unwrap();
    assert_eq!(server.requests(), ["gitrepository/ns/r/abc.tar.gz"]);
}

async fn unpack_bytes(
    data: Vec<u8>,
    limits: UnpackLimits,
) -> Result<flux_converger::flux::artifact::UnpackedArtifact, ArtifactError> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), data).unwrap();
    unpack_file(file.path(), limits).await
}

fn raw(name: &str, kind: tar::EntryType, data: &[u8]) -> Entry {
    Entry::Raw {
        name: name.as_bytes().to_vec(),
        kind,
        data: data.to_vec(),
    }
}

#[tokio::test]
async fn hostile_entries_are_refused_by_table() {
    use tar::EntryType as T;
    let cases = [
        (
            "traversal",
            raw("../escape.yaml", T::Regular, b"x"),
            "path contains \"..\"",
        ),
        (
            "nested traversal",
            raw("./a/../../escape.yaml", T::Regular, b"x"),
            "path contains \"..\"",
        ),
        (
            "absolute",
            raw("/tmp/escape.yaml", T::Regular, b"x"),
            "absolute path",
        ),
        (
            "char device",
            raw("dev", T::Char, b""),
            "device file or fifo",
        ),
        (
            "block device",
            raw("blk", T::Block, b""),
            "device file or fifo",
        ),
        ("fifo", raw("pipe", T::Fifo, b""), "device file or fifo"),
    ];
    for (what, entry, reason) in cases {
        let data = tar_gz(&[Entry::Dir(".".into()), entry]);
        let e = unpack_bytes(data, UnpackLimits::default())
            .await
            .unwrap_err();
        assert!(
            matches!(e, ArtifactError::UnsafeEntry { .. }),
            "{what}: {e}"
        );
        assert!(e.to_string().contains(reason), "{what}: {e}");
        assert!(e.is_bad_input(), "{what}");
    }
}

#[tokio::test]
async fn links_are_skipped_not_followed() {
    let data = tar_gz(&[
        Entry::Dir(".".into()),
        Entry::File("a.yaml".into(), CM.as_bytes().to_vec()),
        Entry::Symlink("passwd.yaml".into(), "/etc/passwd".into()),
        Entry::Symlink("up".into(), "..".into()),
        Entry::HardLink("hard.yaml".into(), "/etc/passwd".into()),
        Entry::Exec("run.sh".into(), b"#!/bin/sh\n".to_vec()),
    ]);
    let unpacked = unpack_bytes(data, UnpackLimits::default()).await.unwrap();
    let root = unpacked.root();
    assert!(root.join("a.yaml").is_file());
    assert!(root.join("run.sh").is_file());
    for skipped in ["passwd.yaml", "up", "hard.yaml"] {
        assert!(
            std::fs::symlink_metadata(root.join(skipped)).is_err(),
            "{skipped}"
        );
    }
    assert_eq!(
        unpacked.stats.skipped_links,
        ["passwd.yaml", "up", "hard.yaml"]
    );
}

#[tokio::test]
async fn decompression_bombs_are_capped() {
    // 8 MiB of zeros compresses to a few KiB.
    let zeros = vec![0u8; 8 << 20];
    let bomb = tar_gz(&[
        Entry::Dir(".".into()),
        Entry::File("zeros.yaml".into(), zeros),
    ]);
    assert!(bomb.len() < 100_000);
    let limits = UnpackLimits {
        max_bytes: 1 << 20,
        max_entries: 100,
        max_file_bytes: 1 << 20,
    };
    let e = unpack_bytes(bomb, limits.clone()).await.unwrap_err();
    assert!(matches!(e, ArtifactError::UnpackedTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("zeros.yaml"), "{e}");

    let many: Vec<Entry> = std::iter::once(Entry::Dir(".".into()))
        .chain((0..200).map(|i| Entry::File(format!("f{i}.yaml"), Vec::new())))
        .collect();
    let e = unpack_bytes(tar_gz(&many), limits).await.unwrap_err();
    assert!(
        matches!(e, ArtifactError::TooManyEntries { limit: 100, .. }),
        "{e}"
    );
}

#[tokio::test]
async fn corrupt_archives_are_reported() {
    let e = unpack_bytes(
        b"not a gzip stream at all".to_vec(),
        UnpackLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ArtifactError::Corrupt { .. }), "{e}");
}

#[tokio::test]
async fn an_oversize_file_is_refused_from_its_header_before_it_is_read() {
    let limits = UnpackLimits {
        max_bytes: 1 << 20,
        max_entries: 100,
        max_file_bytes: 16 << 10,
    };
    // At the cap: unpacked. One byte over: refused, naming the file and the cap.
    let at_cap = tar_gz(&[
        Entry::Dir(".".into()),
        Entry::File("ok.yaml".into(), vec![b'#'; 16 << 10]),
    ]);
    let unpacked = unpack_bytes(at_cap, limits.clone()).await.unwrap();
    assert_eq!(unpacked.stats.bytes, 16 << 10);
    let over = tar_gz(&[
        Entry::Dir(".".into()),
        Entry::File("ok.yaml".into(), CM.as_bytes().to_vec()),
        Entry::File("apps/big.yaml".into(), vec![b'0'; (16 << 10) + 1]),
    ]);
    let e = unpack_bytes(over, limits.clone()).await.unwrap_err();
    assert!(
        matches!(&e, ArtifactError::FileTooLarge { entry, size, limit: 16384, .. }
            if entry == "apps/big.yaml" && *size == (16 << 10) + 1),
        "{e}"
    );
    assert!(
        e.to_string().contains("maximum file size of 16384 bytes"),
        "{e}"
    );
    assert!(e.is_bad_input());

    // The 2 GiB file of the attack, declared and never sent: the header alone decides, so the
    // answer is the cap, not a corrupt stream found after reading.
    let bomb = declared_only_tar_gz("zeros.yaml", 2 << 30);
    let e = unpack_bytes(bomb.clone(), limits).await.unwrap_err();
    assert!(matches!(e, ArtifactError::UnpackedTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("zeros.yaml"), "{e}");
    let e = unpack_bytes(
        bomb,
        UnpackLimits {
            max_bytes: 4 << 30,
            ..UnpackLimits::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, ArtifactError::FileTooLarge { size, .. } if *size == 2 << 30),
        "{e}"
    );
    // And under the defaults, which are Flux's untar's (100 MiB in all).
    let e = unpack_bytes(
        declared_only_tar_gz("zeros.yaml", 2 << 30),
        UnpackLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("more than {} bytes", 100u64 << 20)),
        "{e}"
    );
}
