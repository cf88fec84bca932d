//! Test helpers shared by the artifact, render and storage tests and the downloads bench:
//! tar.gz archives in source-controller's layout, and a local HTTP server standing in for it.
//!
//! Flux's layout: a root entry `.`, relative names, directories 0750, files 0600 (0700 when
//! executable), uid/gid 0, zero times, regular files and directories only.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One archive entry. `Raw` writes the name bytes verbatim (for hostile archives).
pub enum Entry {
    Dir(String),
    File(String, Vec<u8>),
    Exec(String, Vec<u8>),
    Symlink(String, String),
    HardLink(String, String),
    Raw {
        name: Vec<u8>,
        kind: tar::EntryType,
        data: Vec<u8>,
    },
}

fn header(name: &[u8], kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    {
        let old = h.as_old_mut();
        old.name = [0; 100];
        old.name[..name.len()].copy_from_slice(name);
    }
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h.set_cksum();
    h
}

/// Builds a gzip'd tar of `entries`, in order, exactly as given (add the root `.` yourself).
/// A `.tar.gz` holding only the header of one regular file that declares `declared` bytes
/// and carries none: an unpacker that reads the data first fails as corrupt, one that checks
/// the header first refuses the size. Lets tests stand in for a 2 GiB file without writing it.
pub fn declared_only_tar_gz(name: &str, declared: u64) -> Vec<u8> {
    use std::io::Write as _;
    let h = header(name.as_bytes(), tar::EntryType::Regular, 0o600, declared);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(h.as_bytes()).unwrap();
    gz.finish().unwrap()
}

pub fn tar_gz(entries: &[Entry]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    for e in entries {
        match e {
            Entry::Dir(n) => {
                let h = header(n.as_bytes(), tar::EntryType::Directory, 0o750, 0);
                b.append(&h, std::io::empty()).unwrap();
            }
            Entry::File(n, data) | Entry::Exec(n, data) => {
                let mode = if matches!(e, Entry::Exec(..)) {
                    0o700
                } else {
                    0o600
                };
                let h = header(
                    n.as_bytes(),
                    tar::EntryType::Regular,
                    mode,
                    data.len() as u64,
                );
                b.append(&h, data.as_slice()).unwrap();
            }
            Entry::Symlink(n, target) | Entry::HardLink(n, target) => {
                let kind = if matches!(e, Entry::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                let mut h = header(n.as_bytes(), kind, 0o777, 0);
                h.set_link_name(target).unwrap();
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            }
            Entry::Raw { name, kind, data } => {
                let h = header(name, *kind, 0o600, data.len() as u64);
                b.append(&h, data.as_slice()).unwrap();
            }
        }
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// An artifact of `files` (path → content) in Flux's layout: `.`, then every directory before
/// its files, sorted as source-controller's walk emits them.
pub fn flux_artifact(files: &[(&str, &str)]) -> Vec<u8> {
    let mut tree: BTreeMap<String, Option<&str>> = BTreeMap::new();
    for (path, content) in files {
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for dir in &parts[..parts.len() - 1] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(dir);
            tree.entry(prefix.clone()).or_insert(None);
        }
        tree.insert(path.to_string(), Some(content));
    }
    let mut entries = vec![Entry::Dir(".".into())];
    for (path, content) in tree {
        match content {
            None => entries.push(Entry::Dir(path)),
            Some(c) => entries.push(Entry::File(path, c.as_bytes().to_vec())),
        }
    }
    tar_gz(&entries)
}

/// Every file under `dir` (relative path → content), for building an artifact from test data.
pub fn files_under(dir: &std::path::Path) -> Vec<(String, String)> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// Called with a path the server is about to answer 404 for.
pub type MissingHook = Box<dyn Fn(&str) + Send>;

/// What the server does for a path before serving it: queued statuses are answered first.
#[derive(Default)]
pub struct ServerState {
    pub files: Mutex<HashMap<String, Vec<u8>>>,
    pub failures: Mutex<HashMap<String, VecDeque<u16>>>,
    pub requests: Mutex<Vec<String>>,
    /// Stream bodies without Content-Length (so only the streaming cap can stop them).
    pub chunked: Mutex<bool>,
    /// Called with the path before answering 404 (e.g. to publish a newer revision meanwhile).
    pub on_missing: Mutex<Option<MissingHook>>,
}

/// A stand-in for source-controller's artifact server on 127.0.0.1:0.
#[derive(Clone)]
pub struct ArtifactServer {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
}

impl ArtifactServer {
    pub async fn start() -> Self {
        let state = Arc::new(ServerState::default());
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::get(serve))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    /// Publishes `data` at `path` (e.g. `gitrepository/ns/name/rev.tar.gz`); returns its URL.
    pub fn put(&self, path: &str, data: Vec<u8>) -> String {
        self.state
            .files
            .lock()
            .unwrap()
            .insert(path.to_string(), data);
        self.url(path)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path)
    }

    /// Answers `statuses` (in order) to the next requests for `path` before serving it.
    pub fn fail_first(&self, path: &str, statuses: &[u16]) {
        self.state
            .failures
            .lock()
            .unwrap()
            .insert(path.to_string(), statuses.iter().copied().collect());
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn serve(State(state): State<Arc<ServerState>>, Path(path): Path<String>) -> Response {
    state.requests.lock().unwrap().push(path.clone());
    if let Some(code) = state
        .failures
        .lock()
        .unwrap()
        .get_mut(&path)
        .and_then(|q| q.pop_front())
    {
        return (StatusCode::from_u16(code).unwrap(), "injected failure").into_response();
    }
    let found = state.files.lock().unwrap().get(&path).cloned();
    let Some(data) = found else {
        if let Some(hook) = state.on_missing.lock().unwrap().as_ref() {
            hook(&path);
        }
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    };
    if *state.chunked.lock().unwrap() {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            data.chunks(1024).map(|c| Ok(c.to_vec())).collect();
        let mut r = Response::new(Body::from_stream(futures::stream::iter(chunks)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-gzip"),
        );
        return r;
    }
    ([(header::CONTENT_TYPE, "application/x-gzip")], data).into_response()
}

/// The sha256 digest string of `data`, as source-controller publishes it.
pub fn sha256(data: &[u8]) -> String {
    flux_converger::flux::artifact::digest_of(
        flux_converger::flux::artifact::Algorithm::Sha256,
        data,
    )
    .to_string()
}
