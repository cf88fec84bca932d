//! Downloading an artifact: one attempt streamed into a temporary file and hashed on the way
//! (retries are the caller's, or [`Fetcher::fetch`]'s with `retries`), through the blob cache
//! when there is one, then unpacked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::cache::{BlobCache, Download, Downloaded};
use super::error::ArtifactError;
use super::options::FetchOptions;
use super::unpack::{UnpackedArtifact, unpack_opened, unpack_path};
use crate::digest::{Digest, Hasher};

/// Applies `SOURCE_CONTROLLER_LOCALHOST`: like Go's `u.Host = override`, the whole
/// `host[:port]` is replaced (no port in the override means the scheme's default port).
pub fn rewrite_host(url: &str, host_override: Option<&str>) -> Result<reqwest::Url, ArtifactError> {
    let bad = |reason: String| ArtifactError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let mut parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if let Some(host_port) = host_override {
        let with_scheme = format!("{}://{}", parsed.scheme(), host_port);
        let authority = reqwest::Url::parse(&with_scheme)
            .map_err(|e| bad(format!("SOURCE_CONTROLLER_LOCALHOST={host_port:?}: {e}")))?;
        parsed
            .set_host(authority.host_str())
            .map_err(|e| bad(format!("SOURCE_CONTROLLER_LOCALHOST={host_port:?}: {e}")))?;
        parsed.set_port(authority.port()).map_err(|()| {
            bad(format!(
                "SOURCE_CONTROLLER_LOCALHOST={host_port:?}: cannot set port"
            ))
        })?;
    }
    Ok(parsed)
}

/// Downloads, verifies and unpacks artifacts; with a blob cache ([`Fetcher::with_store`]) every
/// digest is downloaded once and unpacked from the cache after.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    options: FetchOptions,
    store: Option<Arc<dyn BlobCache>>,
}

/// The request header a replica sends when it fetches a published artifact from a peer: the
/// peer answers from what it holds and never fetches on a miss, so two replicas missing one
/// artifact cannot ask each other in a loop.
pub const PEER_HEADER: &str = "x-flux-converger-peer";

impl Fetcher {
    /// Builds the HTTP client. The rustls provider must be installed first
    /// (`tls::install_crypto_provider`).
    pub fn new(options: FetchOptions) -> Result<Self, ArtifactError> {
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ArtifactError::Connection {
                url: String::new(),
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Self {
            client,
            options,
            store: None,
        })
    }

    /// Downloads through `store`: one download per digest, shared by concurrent fetches.
    pub fn with_store(mut self, store: impl BlobCache + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// The blob cache fetches go through, if any.
    pub fn store(&self) -> Option<&Arc<dyn BlobCache>> {
        self.store.as_ref()
    }

    /// Downloads `url` (or takes it from the store), checks it against `digest` and unpacks it
    /// into a fresh temporary root.
    pub async fn fetch(&self, url: &str, digest: &str) -> Result<UnpackedArtifact, ArtifactError> {
        let mut backoff = self.options.backoff;
        let mut attempt: u32 = 0;
        loop {
            match self.fetch_once(url, digest).await {
                Err(error) if error.is_retryable() && attempt < self.options.retries => {
                    attempt += 1;
                    tracing::warn!(url, attempt, %error, "artifact download failed, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.options.max_backoff);
                }
                other => return other,
            }
        }
    }

    async fn fetch_once(&self, url: &str, digest: &str) -> Result<UnpackedArtifact, ArtifactError> {
        let expected = Digest::parse(digest)?;
        let target = rewrite_host(url, self.options.host_override.as_deref())?;
        let name = target.to_string();
        let limits = self.options.unpack.clone();
        match &self.store {
            Some(store) => {
                let download = self.download_to(target, &expected, false);
                let file = store.open_blob(&expected, download).await?;
                unpack_opened(file, name, limits).await
            }
            None => {
                let (file, _) =
                    download_once(&self.client, &self.options, &target, &expected, None, false)
                        .await?;
                let path = file.path().to_path_buf();
                let unpacked = unpack_path(path, name, limits).await;
                drop(file);
                unpacked
            }
        }
    }

    /// One download of `url` checked against `digest`, for a blob cache to run into its own
    /// directory (the storage keeps published artifacts this way). `peer`: `url` is another
    /// replica's artifact server (sent with [`PEER_HEADER`]).
    pub fn download(
        &self,
        url: &str,
        digest: &Digest,
        peer: bool,
    ) -> Result<Download, ArtifactError> {
        let target = rewrite_host(url, self.options.host_override.as_deref())?;
        Ok(self.download_to(target, digest, peer))
    }

    fn download_to(&self, target: reqwest::Url, expected: &Digest, peer: bool) -> Download {
        let client = self.client.clone();
        let options = self.options.clone();
        let wanted = expected.clone();
        Box::new(move |dir: PathBuf| {
            Box::pin(async move {
                download_once(&client, &options, &target, &wanted, Some(&dir), peer).await
            })
        })
    }
}

/// One download attempt into a temporary file (in `dir`, else the system's), hashing while
/// streaming: the file is returned only when its digest matches.
async fn download_once(
    client: &reqwest::Client,
    options: &FetchOptions,
    url: &reqwest::Url,
    expected: &Digest,
    dir: Option<&Path>,
    peer: bool,
) -> Result<Downloaded, ArtifactError> {
    let name = url.to_string();
    let mut request = client.get(url.clone());
    if peer {
        request = request.header(PEER_HEADER, "1");
    }
    let response = request
        .send()
        .await
        .map_err(|e| ArtifactError::Connection {
            url: name.clone(),
            message: error_chain(&e),
        })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(ArtifactError::NotFound { url: name });
    }
    if !status.is_success() {
        return Err(ArtifactError::Http {
            url: name,
            status: status.as_u16(),
        });
    }
    let limit = options.max_download_bytes;
    if let Some(declared) = response.content_length()
        && declared > limit
    {
        return Err(ArtifactError::TooLarge {
            url: name,
            limit,
            declared: format!(" (Content-Length {declared})"),
        });
    }
    let mut builder = tempfile::Builder::new();
    builder.prefix("flux-converger-artifact-").suffix(".tar.gz");
    let file = match dir {
        Some(dir) => builder.tempfile_in(dir),
        None => builder.tempfile(),
    }
    .map_err(ArtifactError::io(
        "creating a temporary file for the artifact",
    ))?;
    let mut out = tokio::fs::File::from_std(
        file.reopen()
            .map_err(ArtifactError::io("opening the temporary artifact file"))?,
    );
    let mut hasher = Hasher::new(expected.algorithm);
    let mut total: u64 = 0;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ArtifactError::Connection {
            url: name.clone(),
            message: error_chain(&e),
        })?;
        total = total.saturating_add(chunk.len() as u64);
        if total > limit {
            return Err(ArtifactError::TooLarge {
                url: name,
                limit,
                declared: String::new(),
            });
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .map_err(ArtifactError::io("writing the temporary artifact file"))?;
    }
    out.flush()
        .await
        .map_err(ArtifactError::io("writing the temporary artifact file"))?;
    out.sync_all()
        .await
        .map_err(ArtifactError::io("syncing the temporary artifact file"))?;
    let actual = hasher.finish();
    if actual != expected.hex {
        return Err(ArtifactError::DigestMismatch {
            url: name,
            expected: expected.to_string(),
            actual: format!("{}:{}", expected.algorithm.as_str(), actual),
        });
    }
    tracing::debug!(url = %url, bytes = total, digest = %expected, "artifact downloaded and verified");
    Ok((file, total))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rewrite_replaces_host_and_port_like_go() {
        let url =
            "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/r/abc.tar.gz";
        for (over, expected) in [
            (None, url.to_string()),
            (
                Some("localhost:8080"),
                "http://localhost:8080/gitrepository/ns/r/abc.tar.gz".to_string(),
            ),
            (
                Some("127.0.0.1"),
                "http://127.0.0.1/gitrepository/ns/r/abc.tar.gz".to_string(),
            ),
        ] {
            assert_eq!(
                rewrite_host(url, over).unwrap().as_str(),
                expected,
                "{over:?}"
            );
        }
        let with_port = "http://sc:9090/a.tar.gz";
        assert_eq!(
            rewrite_host(with_port, Some("localhost")).unwrap().as_str(),
            "http://localhost/a.tar.gz"
        );
        assert!(rewrite_host("not a url", None).is_err());
    }
}
