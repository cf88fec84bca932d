//! Why a render failed, and whether the revision is at fault (refused) or this host (retried).

use crate::flux::substitute::SubstituteError;

/// Why a render failed. Each names the file, path or object at fault.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{what} {path:?} escapes the artifact root")]
    Escapes { what: String, path: String },
    /// A reference the build could follow out of the root without it being seen here: an
    /// unknown shape, a plugin that is not builtin, a remote plugin config. Never quotes the
    /// file a reference points at.
    #[error("{what}: {reason}")]
    Unconfined { what: String, reason: String },
    /// `--no-remote-bases`, in the words of kustomize-controller's flag of that name.
    #[error(
        "{what} {reference:?} is remote: remote bases are disallowed (--no-remote-bases), all resources must refer to local files included in the source artifact"
    )]
    RemoteBase { what: String, reference: String },
    #[error("kustomization path not found: {path:?} is not a directory in the artifact")]
    PathNotFound { path: String },
    #[error("failed to decode Kubernetes YAML from {file}: {message}")]
    InvalidYaml { file: String, message: String },
    #[error("kustomization file {file}: {message}")]
    KustomizationFile { file: String, message: String },
    #[error("kustomization overlay: {message}")]
    Overlay { message: String },
    #[error("invalid kustomize command {command:?}: it is empty")]
    BadCommand { command: String },
    #[error("cannot run kustomize (`{command}`): {error}")]
    KustomizeSpawn {
        command: String,
        error: std::io::Error,
    },
    #[error("kustomize build failed for {dir} (`{command}`, {status}): {stderr}")]
    KustomizeFailed {
        command: String,
        dir: String,
        status: String,
        stderr: String,
        /// kustomize said it could not fetch a remote base: the network, not the tree.
        remote: bool,
    },
    /// Killed by a signal not of our sending (the OOM killer, an operator): this host.
    #[error("kustomize build of {dir} (`{command}`) was killed by {signal}: {stderr}")]
    KustomizeKilled {
        command: String,
        dir: String,
        signal: String,
        stderr: String,
    },
    #[error(
        "kustomize build of {dir} (`{command}`) timed out after {}: killed (--render-timeout)",
        humantime::format_duration(*after)
    )]
    KustomizeTimeout {
        command: String,
        dir: String,
        after: std::time::Duration,
    },
    /// The same overlay always prints as much: input, not this host.
    #[error(
        "kustomize build of {dir} (`{command}`) printed more than the maximum render size of {limit} bytes: killed (--max-render-size)"
    )]
    KustomizeOutputTooLarge {
        command: String,
        dir: String,
        limit: u64,
    },
    #[error("kustomize output: {message}")]
    Output { message: String },
    #[error("built object #{index}: {message}")]
    InvalidObject { index: usize, message: String },
    /// Flux's own wording, naming the object: `post build failed for '<object>': ...`.
    #[error("{error}")]
    Substitute { error: SubstituteError },
    #[error(
        "{object} namespace not specified: kustomize-controller would refuse this revision (set spec.targetNamespace or metadata.namespace)"
    )]
    NoNamespace { object: String },
    /// A local tree larger than an artifact may unpack to.
    #[error("{file}: {what}")]
    TooLarge { file: String, what: String },
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
}

impl RenderError {
    /// Whether the revision or the Kustomization is wrong (exit 2, refused) rather than this
    /// host or the network (exit 1, retried): only what no retry of the same input can fix.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Io { .. }
            | Self::KustomizeSpawn { .. }
            | Self::KustomizeKilled { .. }
            | Self::KustomizeTimeout { .. } => false,
            Self::KustomizeFailed { remote, .. } => !remote,
            _ => true,
        }
    }
}
