//! Archive and YAML bombs in a tenant's artifact: each is refused as bad input (exit 2, naming
//! the cap) by `render --artifact` within 100 MB of peak RSS, and by the library's unpack (what
//! the service's fetch runs) without allocating what the archive declares.
//!
//! The archives declare gigabytes but are a few MB of gzip: the deflate block of 1 MiB of one
//! byte, after a sync flush, is the same bytes every time, so it is written once and repeated
//! (the CRC is combined, not computed over the gigabytes). The child's peak RSS is its
//! `ru_maxrss` from `wait4`, a memory bound rather than a time limit; an address-space limit on
//! the child keeps a regression from taking the test machine's memory with it.

use std::path::Path;
use std::process::{Command, Stdio};

use flux_converger::flux::artifact::{ArtifactError, UnpackLimits, unpack_file};

const MIB: u64 = 1 << 20;
/// The budget for a hostile artifact (issue 27.4, issue 30.2).
const MAX_RSS_BYTES: u64 = 100 * 1_000_000;
/// The child's address space: far above any honest render, far below the machine.
const CHILD_ADDRESS_SPACE: u64 = 4 << 30;

/// A gzip stream written piece by piece: bytes as given, or long runs of one byte.
struct GzStream<W: std::io::Write> {
    out: W,
    deflate: flate2::Compress,
    crc: flate2::Crc,
}

impl<W: std::io::Write> GzStream<W> {
    fn new(mut out: W) -> Self {
        out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])
            .unwrap();
        Self {
            out,
            deflate: flate2::Compress::new(flate2::Compression::best(), false),
            crc: flate2::Crc::new(),
        }
    }

    fn deflate(&mut self, data: &[u8], flush: flate2::FlushCompress) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() / 2 + 1024);
        let mut input = data;
        loop {
            let before_in = self.deflate.total_in();
            out.reserve(64 << 10);
            let status = self.deflate.compress_vec(input, &mut out, flush).unwrap();
            input = &input[(self.deflate.total_in() - before_in) as usize..];
            let done = match flush {
                flate2::FlushCompress::Finish => status == flate2::Status::StreamEnd,
                _ => input.is_empty() && out.len() < out.capacity(),
            };
            if done {
                return out;
            }
        }
    }

    fn bytes(&mut self, data: &[u8]) {
        self.crc.update(data);
        let block = self.deflate(data, flate2::FlushCompress::Sync);
        self.out.write_all(&block).unwrap();
    }

    /// `count` bytes of `byte`, for the price of one deflate block per MiB.
    fn run(&mut self, byte: u8, count: u64) {
        let chunk = vec![byte; MIB as usize];
        let mut chunk_crc = flate2::Crc::new();
        chunk_crc.update(&chunk);
        let mut left = count;
        let mut repeated: Option<Vec<u8>> = None;
        let mut previous: Option<Vec<u8>> = None;
        while left >= MIB {
            match &repeated {
                Some(block) => self.out.write_all(block).unwrap(),
                None => {
                    let block = self.deflate(&chunk, flate2::FlushCompress::Sync);
                    self.out.write_all(&block).unwrap();
                    if previous.as_ref() == Some(&block) {
                        repeated = Some(block);
                    } else {
                        previous = Some(block);
                    }
                }
            }
            self.crc.combine(&chunk_crc);
            left -= MIB;
        }
        if left > 0 {
            self.bytes(&vec![byte; left as usize]);
        }
    }

    fn finish(mut self) {
        let tail = self.deflate(&[], flate2::FlushCompress::Finish);
        self.out.write_all(&tail).unwrap();
        self.out.write_all(&self.crc.sum().to_le_bytes()).unwrap();
        self.out
            .write_all(&self.crc.amount().to_le_bytes())
            .unwrap();
        self.out.flush().unwrap();
    }
}

fn header(name: &[u8], kind: tar::EntryType, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_entry_type(kind);
    h.set_mode(0o600);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h.set_cksum();
    *h.as_bytes()
}

fn pad(size: u64) -> Vec<u8> {
    vec![0; ((512 - size % 512) % 512) as usize]
}

const CM: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n";

/// Flux's layout: `.`, `apps/`, `apps/ok.yaml`; the end-of-archive blocks.
fn ok_tree(gz: &mut GzStream<impl std::io::Write>) {
    gz.bytes(&header(b".", tar::EntryType::Directory, 0));
    gz.bytes(&header(b"apps", tar::EntryType::Directory, 0));
    gz.bytes(&header(
        b"apps/ok.yaml",
        tar::EntryType::Regular,
        CM.len() as u64,
    ));
    gz.bytes(CM);
    gz.bytes(&pad(CM.len() as u64));
    gz.bytes(&[0; 1024]);
}

fn archive_file(
    write: impl FnOnce(&mut GzStream<std::io::BufWriter<std::fs::File>>),
) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".tar.gz")
        .tempfile()
        .unwrap();
    let out = std::io::BufWriter::new(file.reopen().unwrap());
    let mut gz = GzStream::new(out);
    write(&mut gz);
    gz.finish();
    file
}

/// A GNU long name (`L`) record declaring `declared` bytes of NULs, then a tree.
fn long_name_bomb(declared: u64) -> tempfile::NamedTempFile {
    archive_file(|gz| {
        gz.bytes(&header(b".", tar::EntryType::Directory, 0));
        gz.bytes(&header(
            b"././@LongLink",
            tar::EntryType::GNULongName,
            declared,
        ));
        gz.run(0, declared);
        gz.bytes(&pad(declared));
        gz.bytes(&header(b"apps", tar::EntryType::Directory, 0));
        gz.bytes(&header(
            b"apps/ok.yaml",
            tar::EntryType::Regular,
            CM.len() as u64,
        ));
        gz.bytes(CM);
        gz.bytes(&pad(CM.len() as u64));
        gz.bytes(&[0; 1024]);
    })
}

/// A PAX header (`x`) of one `comment` record `declared` bytes long, before the tree's `.`.
fn pax_bomb(declared: u64) -> tempfile::NamedTempFile {
    archive_file(|gz| {
        let digits = declared.to_string();
        let prefix = format!("{digits} comment=");
        gz.bytes(&header(
            b"./PaxHeaders/x",
            tar::EntryType::XHeader,
            declared,
        ));
        gz.bytes(prefix.as_bytes());
        gz.run(b'0', declared - prefix.len() as u64 - 1);
        gz.bytes(b"\n");
        gz.bytes(&pad(declared));
        ok_tree(gz);
    })
}

/// A regular file of `declared` zeros, data present (the plain gzip bomb).
fn file_bomb(declared: u64) -> tempfile::NamedTempFile {
    archive_file(|gz| {
        gz.bytes(&header(b".", tar::EntryType::Directory, 0));
        gz.bytes(&header(b"apps", tar::EntryType::Directory, 0));
        gz.bytes(&header(
            b"apps/zeros.yaml",
            tar::EntryType::Regular,
            declared,
        ));
        gz.run(0, declared);
        gz.bytes(&pad(declared));
        gz.bytes(&header(
            b"apps/ok.yaml",
            tar::EntryType::Regular,
            CM.len() as u64,
        ));
        gz.bytes(CM);
        gz.bytes(&pad(CM.len() as u64));
        gz.bytes(&[0; 1024]);
    })
}

/// Many PAX headers, each under the record cap, each before an empty file: no entry declares
/// a byte of data, yet the stream inflates to `count` × `record` bytes.
fn many_records(count: u64, record: u64) -> tempfile::NamedTempFile {
    archive_file(|gz| {
        gz.bytes(&header(b".", tar::EntryType::Directory, 0));
        for i in 0..count {
            let digits = record.to_string();
            let prefix = format!("{digits} comment=");
            gz.bytes(&header(b"./PaxHeaders/x", tar::EntryType::XHeader, record));
            gz.bytes(prefix.as_bytes());
            gz.run(b'0', record - prefix.len() as u64 - 1);
            gz.bytes(b"\n");
            gz.bytes(&pad(record));
            let name = format!("f{i}.txt");
            gz.bytes(&header(name.as_bytes(), tar::EntryType::Regular, 0));
        }
        gz.bytes(&[0; 1024]);
    })
}

/// A tar.gz of `files` (path, content), Flux's layout.
fn small_artifact(files: &[(&str, &str)]) -> tempfile::NamedTempFile {
    archive_file(|gz| {
        gz.bytes(&header(b".", tar::EntryType::Directory, 0));
        gz.bytes(&header(b"apps", tar::EntryType::Directory, 0));
        for (path, content) in files {
            gz.bytes(&header(
                path.as_bytes(),
                tar::EntryType::Regular,
                content.len() as u64,
            ));
            gz.bytes(content.as_bytes());
            gz.bytes(&pad(content.len() as u64));
        }
        gz.bytes(&[0; 1024]);
    })
}

const KS: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: tenant, namespace: flux-system}
spec:
  interval: 10m
  sourceRef: {kind: GitRepository, name: tenant}
  path: ./apps
  prune: true
  targetNamespace: tenant
";

struct Run {
    code: i32,
    stderr: String,
    max_rss: u64,
}

/// One test of this file at a time: a forked child starts with a copy of this process's
/// anonymous memory in its RSS high-water mark, so no other test may be building an archive
/// while a child is measured.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `render --artifact archive`, with the child's exit code, stderr and peak RSS (bytes).
fn render(archive: &Path) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let ks = dir.path().join("ks.yaml");
    std::fs::write(&ks, KS).unwrap();
    let stderr_path = dir.path().join("stderr");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_flux-converger"));
    command
        .args(["--log-level", "warn", "render", "--artifact"])
        .arg(archive)
        .arg("--kustomization-file")
        .arg(&ks)
        .env_remove("SOURCE_CONTROLLER_LOCALHOST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: only setrlimit, async-signal-safe, runs in the child between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let limit = libc::rlimit {
                rlim_cur: CHILD_ADDRESS_SPACE,
                rlim_max: CHILD_ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, for its rusage"
    )]
    let child = command.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is valid; wait4 reaps our own child, which `child` never waits on.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    };
    Run {
        code,
        stderr: std::fs::read_to_string(&stderr_path).unwrap(),
        // Linux reports kilobytes.
        max_rss: usage.ru_maxrss as u64 * 1024,
    }
}

fn assert_refused(run: &Run, wanted: &[&str]) {
    assert_eq!(run.code, 2, "exit code; stderr: {}", run.stderr);
    for w in wanted {
        assert!(run.stderr.contains(w), "{w:?} not in: {}", run.stderr);
    }
    assert!(
        run.max_rss <= MAX_RSS_BYTES,
        "peak RSS {} MB > 100 MB; stderr: {}",
        run.max_rss / 1_000_000,
        run.stderr
    );
    eprintln!("peak RSS {:.1} MB", run.max_rss as f64 / 1e6);
}

#[test]
fn a_3_gib_gnu_long_name_is_refused_within_100_mb() {
    let _serial = serial();
    let bomb = long_name_bomb(3 << 30);
    let size = std::fs::metadata(bomb.path()).unwrap().len();
    assert!(size < 8 * MIB, "{size} bytes of gzip");
    let run = render(bomb.path());
    assert_refused(
        &run,
        &[
            "GNU long name record of 3221225472 bytes",
            "maximum header record size of 65536 bytes",
        ],
    );
}

#[test]
fn a_1_gib_pax_record_is_refused_within_100_mb() {
    let _serial = serial();
    let bomb = pax_bomb(1 << 30);
    let size = std::fs::metadata(bomb.path()).unwrap().len();
    assert!(size < 4 * MIB, "{size} bytes of gzip");
    let run = render(bomb.path());
    assert_refused(
        &run,
        &[
            "PAX header record of 1073741824 bytes",
            "maximum header record size of 65536 bytes",
        ],
    );
}

/// Already capped before the stream cap (the per-file cap reads the header): kept as the
/// third bomb of the set, so a change to the unpack cannot bring it back.
#[test]
fn a_2_gib_file_of_zeros_is_refused_within_100_mb() {
    let _serial = serial();
    let bomb = file_bomb(2 << 30);
    let run = render(bomb.path());
    assert_refused(&run, &["apps/zeros.yaml", "(--max-unpacked-size)"]);
}

#[test]
fn billion_laughs_is_refused_within_100_mb_naming_the_file_and_the_budget() {
    let _serial = serial();
    let lol = billion_laughs();
    let archive = small_artifact(&[("apps/lol.yaml", &lol)]);
    let run = render(archive.path());
    assert_refused(&run, &["./apps/lol.yaml", "budget breached"]);
}

/// A 9-level YAML alias bomb in one ConfigMap: 9^9 strings once expanded.
fn billion_laughs() -> String {
    let mut lol = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\ndata:\n");
    lol.push_str(
        "  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let names = b"abcdefghi";
    for level in 1..names.len() {
        let (this, prev) = (names[level] as char, names[level - 1] as char);
        let aliases = vec![format!("*{prev}"); 9].join(",");
        lol.push_str(&format!("  {this}: &{this} [{aliases}]\n"));
    }
    lol
}

/// The same bomb named by a kustomization file: kustomize would parse it itself, with no budget
/// on aliases (20 GB and a kill by --render-timeout, measured), so it is parsed under the
/// budget before the build and refused there.
#[test]
fn billion_laughs_listed_by_a_kustomization_is_refused_before_the_build() {
    let _serial = serial();
    let lol = billion_laughs();
    let archive = small_artifact(&[
        ("apps/kustomization.yaml", "resources: [lol.yaml]\n"),
        ("apps/lol.yaml", &lol),
    ]);
    let run = render(archive.path());
    assert_refused(&run, &["./apps/lol.yaml", "budget breached"]);
}

/// Anchors and aliases in a real manifest stay legal: 300 aliases of 30 anchors render (the
/// crate's ratio heuristic refuses more than ten aliases per anchor past 100 aliases).
#[test]
fn ordinary_anchors_still_render() {
    let _serial = serial();
    let mut doc = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: anchored\n  annotations:\n",
    );
    for a in 0..30 {
        doc.push_str(&format!("    a{a}: &v{a} \"shared value {a}\"\n"));
    }
    doc.push_str("data:\n");
    for i in 0..300 {
        doc.push_str(&format!("  k{i}: *v{}\n", i % 30));
    }
    let archive = small_artifact(&[("apps/cm.yaml", &doc)]);
    let run = render(archive.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
}

// ---- the library's unpack, which the service's fetch runs ----

fn unpack_blocking(path: &Path, limits: UnpackLimits) -> Result<u64, ArtifactError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(unpack_file(path, limits))
        .map(|u| u.stats.bytes)
}

/// This process's own peak RSS so far, in bytes.
fn own_max_rss() -> u64 {
    // SAFETY: a zeroed rusage is valid for getrusage to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn the_service_unpack_refuses_header_bombs_without_allocating_them() {
    let _serial = serial();
    let long_name = long_name_bomb(3 << 30);
    let pax = pax_bomb(1 << 30);
    let before = own_max_rss();
    let e = unpack_blocking(long_name.path(), UnpackLimits::default()).unwrap_err();
    assert!(
        matches!(&e, ArtifactError::HeaderRecordTooLarge { size, limit: 65536, .. } if *size == 3 << 30),
        "{e}"
    );
    assert!(e.is_bad_input());
    let e = unpack_blocking(pax.path(), UnpackLimits::default()).unwrap_err();
    assert!(
        matches!(&e, ArtifactError::HeaderRecordTooLarge { size, .. } if *size == 1 << 30),
        "{e}"
    );
    let grown = own_max_rss().saturating_sub(before);
    assert!(grown < 64 * MIB, "peak RSS grew by {grown} bytes");
}

#[test]
fn every_decompressed_byte_counts_against_the_unpacked_cap() {
    let _serial = serial();
    // 80 PAX records of 60 KiB: 4.9 MB of stream, not a byte of file data declared, over
    // 2 MiB and the 1 MiB allowed for tar's own bytes.
    let archive = many_records(80, 60 << 10);
    let limits = UnpackLimits {
        max_bytes: 2 * MIB,
        ..UnpackLimits::default()
    };
    let e = unpack_blocking(archive.path(), limits).unwrap_err();
    assert!(
        matches!(&e, ArtifactError::StreamTooLarge { limit, .. } if *limit == 2 * MIB),
        "{e}"
    );
    assert!(e.to_string().contains("(--max-unpacked-size)"), "{e}");
    assert!(e.is_bad_input());
    // Under a cap that holds it all, the same archive unpacks.
    let bytes = unpack_blocking(
        archive.path(),
        UnpackLimits {
            max_bytes: 5 * MIB,
            ..UnpackLimits::default()
        },
    )
    .unwrap();
    assert_eq!(bytes, 0);
}

#[test]
fn long_names_and_pax_paths_within_the_cap_still_unpack() {
    let _serial = serial();
    let long = format!("apps/{}cm.yaml", format!("{}/", "d".repeat(60)).repeat(5));
    let file = archive_file(|gz| {
        gz.bytes(&header(b".", tar::EntryType::Directory, 0));
        let name = format!("{long}\0");
        gz.bytes(&header(
            b"././@LongLink",
            tar::EntryType::GNULongName,
            name.len() as u64,
        ));
        gz.bytes(name.as_bytes());
        gz.bytes(&pad(name.len() as u64));
        gz.bytes(&header(
            b"placeholder",
            tar::EntryType::Regular,
            CM.len() as u64,
        ));
        gz.bytes(CM);
        gz.bytes(&pad(CM.len() as u64));
        let record = format!(" path=apps/{}/pax.yaml\n", "p".repeat(200));
        let len = record.len() + 3;
        let record = format!("{len}{record}");
        assert_eq!(record.len(), len);
        gz.bytes(&header(
            b"./PaxHeaders/x",
            tar::EntryType::XHeader,
            len as u64,
        ));
        gz.bytes(record.as_bytes());
        gz.bytes(&pad(len as u64));
        gz.bytes(&header(b"short", tar::EntryType::Regular, CM.len() as u64));
        gz.bytes(CM);
        gz.bytes(&pad(CM.len() as u64));
        gz.bytes(&[0; 1024]);
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let unpacked = runtime
        .block_on(unpack_file(file.path(), UnpackLimits::default()))
        .unwrap();
    assert!(unpacked.root().join(&long).is_file());
    let pax_path = format!("apps/{}/pax.yaml", "p".repeat(200));
    assert!(unpacked.root().join(pax_path).is_file());
    assert!(!unpacked.root().join("placeholder").exists());
    assert_eq!(unpacked.stats.files, 2);
}
