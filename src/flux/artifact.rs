//! Fetching a Flux source artifact: streaming download, digest check, safe untar.
//!
//! The artifact comes from source-controller over plain HTTP without auth, so nothing in it is
//! trusted: the digest is checked while streaming (the file is never read twice), the download
//! and the unpacked tree are capped (decompression bombs), and entries that could write outside
//! the temporary root (absolute paths, `..`) or are not plain files/directories are refused.
//! Symlinks and hard links are skipped, as kustomize-controller does, so the unpacked tree has
//! none: the render's confinement checks can then reason about paths lexically.
//!
//! - [`options`]: the fetch and unpack knobs, with Flux's defaults.
//! - [`fetch`]: [`Fetcher`], one streamed and hashed download, through a [`BlobCache`] if given.
//! - [`cache`]: what a blob cache must do for the fetcher ([`BlobCache`]; the storage's store).
//! - [`unpack`]: the safe untar under the caps.
//! - [`error`]: [`ArtifactError`], bad artifact or failing network.
//!
//! The digests themselves are [`crate::digest`]'s, re-exported here for the callers that name
//! them with the artifact.

pub mod cache;
pub mod error;
pub mod fetch;
pub mod options;
pub mod unpack;

pub use crate::digest::{Algorithm, Digest, DigestError, Hasher, digest_of};
pub use cache::{BlobCache, Download, Downloaded};
pub use error::ArtifactError;
pub use fetch::{Fetcher, PEER_HEADER, rewrite_host};
pub use options::{
    DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_UNPACKED_BYTES, FetchOptions, UnpackLimits,
};
pub use unpack::{
    MAX_HEADER_RECORD_BYTES, TAR_OVERHEAD_BYTES, UnpackStats, UnpackedArtifact, unpack, unpack_file,
};
