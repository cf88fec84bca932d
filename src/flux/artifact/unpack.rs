//! Unpacking an artifact safely: the tar stream is read raw so every size it declares is checked
//! before it is allocated, entries that could leave the root are refused, and links are skipped.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::error::ArtifactError;
use super::options::UnpackLimits;

/// An artifact unpacked into a temporary directory, removed when this is dropped.
#[derive(Debug)]
pub struct UnpackedArtifact {
    dir: tempfile::TempDir,
    pub stats: UnpackStats,
}

impl UnpackedArtifact {
    /// The artifact root (Flux's archive root `.`).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// What an unpack wrote and skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnpackStats {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    /// Symlinks and hard links, skipped as kustomize-controller does.
    pub skipped_links: Vec<String>,
}

/// Unpacks a local `.tar.gz` (offline `--artifact`) into a fresh temporary root, off the async runtime.
pub async fn unpack_file(
    path: &Path,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    unpack_path(path.to_path_buf(), path.display().to_string(), limits).await
}

/// Unpacks an already opened archive (a stored blob) into a fresh temporary root.
pub(super) async fn unpack_opened(
    file: std::fs::File,
    name: String,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::Builder::new()
            .prefix("flux-converger-render-")
            .tempdir()
            .map_err(ArtifactError::io("creating a temporary directory"))?;
        let stats = unpack(std::io::BufReader::new(file), dir.path(), &name, &limits)?;
        Ok(UnpackedArtifact { dir, stats })
    })
    .await
    .map_err(|e| ArtifactError::Io {
        context: "unpacking task".into(),
        error: std::io::Error::other(e.to_string()),
    })?
}

pub(super) async fn unpack_path(
    path: PathBuf,
    name: String,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    let file = std::fs::File::open(&path).map_err(ArtifactError::io(format!(
        "opening archive {}",
        path.display()
    )))?;
    unpack_opened(file, name, limits).await
}

/// The safe relative path of an entry, or why it is unsafe. `None` for the root entry `.`.
fn safe_relative(raw: &Path) -> Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains \"..\"".into()),
            Component::RootDir | Component::Prefix(_) => return Err("absolute path".into()),
        }
    }
    Ok(if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    })
}

/// Cap on one tar extension record: a GNU long name (`L`) or long link (`K`), or a PAX header
/// (`x`, `g`). Such a record is read whole into memory before the entry it describes, so its
/// size, which the archive declares, must be checked before a byte of it is read. A path is at
/// most `PATH_MAX` (4 KiB) on Linux and source-controller writes nothing else there, so 64 KiB is
/// far above any real artifact (Go's archive/tar, Flux's reader, stops at 1 MiB).
pub const MAX_HEADER_RECORD_BYTES: u64 = 64 << 10;

/// Room in the decompressed stream for tar's own bytes (headers, padding) above
/// `--max-unpacked-size`: the files are capped exactly by their declared sizes, which name the
/// entry; the stream cap bounds everything else, and this much overhead lets the per-entry
/// refusal come first for any honest tree.
pub const TAR_OVERHEAD_BYTES: u64 = 1 << 20;

/// The decompressed stream under the archive reader, counted: every byte tar reads (headers,
/// extension records, padding, the data of skipped entries) counts against the cap, so no part
/// of the tar format can inflate more than `--max-unpacked-size`. Reads stop at the cap: the
/// reader never asks gzip for more than one byte past it.
struct CappedStream<R> {
    inner: R,
    read: u64,
    limit: u64,
    /// Set when the cap was hit, read by [`unpack`] to tell the refusal from a corrupt stream
    /// whatever tar wrapped the I/O error in.
    exceeded: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for CappedStream<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.read).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.limit {
            self.exceeded.set(true);
            return Err(std::io::Error::other(
                "decompressed stream over --max-unpacked-size",
            ));
        }
        Ok(n)
    }
}

/// The extension records read so far for the next real entry.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

/// What an extension record is called in errors.
fn record_kind(kind: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as T;
    match kind {
        T::GNULongName => Some("GNU long name"),
        T::GNULongLink => Some("GNU long link name"),
        T::XHeader => Some("PAX header"),
        T::XGlobalHeader => Some("PAX global header"),
        _ => None,
    }
}

/// Unpacks a gzip'd tar stream into `dest` (an empty directory), enforcing `limits`.
/// Blocking: call it from `spawn_blocking`.
///
/// Why raw entries: `tar::Archive::entries()` merges GNU long names (`L`/`K`) and PAX headers
/// (`x`) into the entry they describe by reading each record whole (`read_all`) before the
/// caller sees any header, so a record declaring 3 GiB is allocated before a cap can look at
/// it. `entries_with_seek` changes only how data is skipped, and no setting of `Archive` bounds
/// those reads. With `raw(true)` every record arrives as an entry of its own with its header
/// first: its declared size is checked against [`MAX_HEADER_RECORD_BYTES`] before it is read,
/// and the name, link name and PAX `path`/`size` are applied here as tar would (a GNU long name
/// wins over a PAX `path`, as in tar and Go's archive/tar). Raw mode does not apply a PAX `size`
/// to the data that follows, so an entry whose PAX `size` disagrees with its header is refused:
/// two readers must never see two different trees in one archive. Underneath, [`CappedStream`]
/// bounds the whole decompressed stream by `limits.max_bytes`.
pub fn unpack(
    reader: impl Read,
    dest: &Path,
    archive_name: &str,
    limits: &UnpackLimits,
) -> Result<UnpackStats, ArtifactError> {
    let exceeded = std::rc::Rc::new(std::cell::Cell::new(false));
    let stream = CappedStream {
        inner: flate2::read::GzDecoder::new(reader),
        read: 0,
        limit: limits.max_bytes.saturating_add(TAR_OVERHEAD_BYTES),
        exceeded: exceeded.clone(),
    };
    let last_entry = std::cell::RefCell::new(String::new());
    let fail = |e: std::io::Error| {
        if exceeded.get() {
            ArtifactError::StreamTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: last_entry.borrow().clone(),
            }
        } else {
            ArtifactError::Corrupt {
                archive: archive_name.to_string(),
                message: e.to_string(),
            }
        }
    };
    let corrupt = |message: &str| ArtifactError::Corrupt {
        archive: archive_name.to_string(),
        message: message.to_string(),
    };
    let mut archive = tar::Archive::new(stream);
    let mut stats = UnpackStats::default();
    let mut entries_seen: u64 = 0;
    let mut declared_total: u64 = 0;
    let mut pending = Pending::default();
    for entry in archive.entries().map_err(fail)?.raw(true) {
        let mut entry = entry.map_err(fail)?;
        let kind = entry.header().entry_type();
        if let Some(what) = record_kind(kind) {
            let size = entry.header().entry_size().map_err(fail)?;
            if size > MAX_HEADER_RECORD_BYTES {
                return Err(ArtifactError::HeaderRecordTooLarge {
                    archive: archive_name.to_string(),
                    record: what,
                    size,
                    limit: MAX_HEADER_RECORD_BYTES,
                });
            }
            let slot = match kind {
                tar::EntryType::GNULongName => &mut pending.long_name,
                tar::EntryType::GNULongLink => &mut pending.long_link,
                tar::EntryType::XHeader => &mut pending.pax,
                // A global header changes nothing we keep (uid, times): read past it.
                _ => {
                    std::io::copy(&mut entry, &mut std::io::sink()).map_err(fail)?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(corrupt(&format!(
                    "two {what} records describing the same member"
                )));
            }
            let mut data = Vec::with_capacity(size as usize);
            (&mut entry)
                .take(MAX_HEADER_RECORD_BYTES)
                .read_to_end(&mut data)
                .map_err(fail)?;
            *slot = Some(data);
            continue;
        }
        let records = std::mem::take(&mut pending);
        let pax_value = |key: &[u8]| -> Option<Vec<u8>> {
            let pax = records.pax.as_deref()?;
            tar::PaxExtensions::new(pax)
                .filter_map(Result::ok)
                .find(|e| e.key_bytes() == key)
                .map(|e| e.value_bytes().to_vec())
        };
        let raw_bytes: Vec<u8> = match &records.long_name {
            Some(name) => name.strip_suffix(&[0]).unwrap_or(name).to_vec(),
            None => pax_value(b"path").unwrap_or_else(|| entry.header().path_bytes().into_owned()),
        };
        let raw = {
            use std::os::unix::ffi::OsStrExt as _;
            PathBuf::from(std::ffi::OsStr::from_bytes(&raw_bytes))
        };
        let entry_name = raw.display().to_string();
        last_entry.replace(entry_name.clone());
        entries_seen += 1;
        if entries_seen > limits.max_entries {
            return Err(ArtifactError::TooManyEntries {
                archive: archive_name.to_string(),
                limit: limits.max_entries,
            });
        }
        let unsafe_entry = |reason: &str| ArtifactError::UnsafeEntry {
            archive: archive_name.to_string(),
            entry: entry_name.clone(),
            reason: reason.to_string(),
        };
        // Count declared sizes of every entry, also skipped ones: their data is still inflated.
        let declared = entry.header().entry_size().map_err(fail)?;
        if let Some(pax_size) = pax_value(b"size") {
            let pax_size = std::str::from_utf8(&pax_size)
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            if pax_size != Some(declared) {
                return Err(unsafe_entry(&format!(
                    "PAX size {} disagrees with the header's {declared}",
                    pax_size.map_or_else(|| "(invalid)".to_string(), |s| s.to_string())
                )));
            }
        }
        declared_total = declared_total.saturating_add(declared);
        if declared_total > limits.max_bytes {
            return Err(ArtifactError::UnpackedTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: entry_name,
            });
        }
        use tar::EntryType as T;
        match kind {
            T::Symlink | T::Link => {
                tracing::debug!(archive = archive_name, entry = %entry_name, "skipping link in artifact");
                stats.skipped_links.push(entry_name);
                continue;
            }
            T::Char | T::Block | T::Fifo => return Err(unsafe_entry("device file or fifo")),
            T::Regular | T::Continuous | T::Directory => {}
            _ => return Err(unsafe_entry("unsupported entry type")),
        }
        let Some(relative) = safe_relative(&raw).map_err(|r| unsafe_entry(&r))? else {
            continue; // the root entry "."
        };
        let target = dest.join(&relative);
        if kind == T::Directory {
            std::fs::create_dir_all(&target)
                .map_err(ArtifactError::io(format!("creating {}", target.display())))?;
            stats.dirs += 1;
            continue;
        }
        if declared > limits.max_file_bytes {
            return Err(ArtifactError::FileTooLarge {
                archive: archive_name.to_string(),
                entry: entry_name,
                size: declared,
                limit: limits.max_file_bytes,
            });
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(ArtifactError::io(format!("creating {}", parent.display())))?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(ArtifactError::io(format!("creating {}", target.display())))?;
        // The tar reader yields exactly the declared size; the cap holds even if it did not.
        let remaining = limits
            .max_bytes
            .saturating_sub(stats.bytes)
            .min(limits.max_file_bytes);
        let written = std::io::copy(
            &mut (&mut entry).take(remaining.saturating_add(1)),
            &mut out,
        )
        .map_err(fail)?;
        if written > remaining {
            return Err(ArtifactError::UnpackedTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: entry_name,
            });
        }
        stats.bytes += written;
        stats.files += 1;
    }
    if pending.long_name.is_some() || pending.long_link.is_some() || pending.pax.is_some() {
        return Err(corrupt(
            "members found describing a future member but no future member found",
        ));
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths_are_checked_by_table() {
        for (raw, expected) in [
            (".", Ok(None)),
            ("./", Ok(None)),
            ("./a/b.yaml", Ok(Some(PathBuf::from("a/b.yaml")))),
            ("a/./b.yaml", Ok(Some(PathBuf::from("a/b.yaml")))),
            ("../x", Err(())),
            ("a/../../x", Err(())),
            ("/etc/passwd", Err(())),
        ] {
            let got = safe_relative(Path::new(raw)).map_err(|_| ());
            assert_eq!(got, expected, "{raw}");
        }
    }
}
