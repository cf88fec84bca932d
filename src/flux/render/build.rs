//! The kustomize build, by an external binary.
//!
//! kustomize-controller links kustomize; the converger runs one (`kubectl kustomize` by default,
//! or a `kustomize build`), with load restrictions off as Flux builds. Its stderr is quoted on
//! failure since that is where kustomize explains what is wrong with the tree.
//!
//! The process is untrusted in two ways: an overlay can multiply its input (a few kilobytes of
//! patches and generators can print gigabytes), and a remote base can hang on the network. So
//! its output is read under a cap, the whole build runs under a deadline, and on either the
//! process is killed with its process group (git, which kustomize runs to fetch a remote
//! base, is a child that would otherwise outlive it).
//!
//! It is also untrusted in what it reads: the child starts with a cleared environment and, where
//! the kernel offers Landlock, can read only the artifact root and system paths and write only
//! a scratch directory of its own ([`super::sandbox`]).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::error::RenderError;
use super::sandbox::{self, SandboxMode, SandboxStatus};
use crate::flux::artifact::DEFAULT_MAX_UNPACKED_BYTES;

/// The default build command: kubectl's built-in kustomize, load restrictions off like Flux.
pub const DEFAULT_KUSTOMIZE: &str = "kubectl kustomize --load-restrictor=LoadRestrictionsNone";

/// kustomize-controller's default `spec.timeout` (its reconcile, build included, is bounded by it).
pub const DEFAULT_RENDER_TIMEOUT: Duration = Duration::from_secs(120);

/// The default cap on kustomize's output: what an artifact may unpack to, so a render can
/// never hold more than the tree it was built from was allowed to.
pub const DEFAULT_MAX_RENDER_BYTES: u64 = DEFAULT_MAX_UNPACKED_BYTES;

/// How much of kustomize's stderr is kept for the error (the rest is read and dropped, so a
/// chatty process never blocks on a full pipe).
const STDERR_KEPT: usize = 64 * 1024;

/// How to run kustomize: a program and its arguments (the directory is appended), and the
/// bounds it runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizeCommand {
    pub program: String,
    pub args: Vec<String>,
    /// The build is killed when it runs longer.
    pub timeout: Duration,
    /// The build is killed when it prints more bytes than this.
    pub max_output: u64,
    /// kustomize-controller's `--no-remote-bases`: a tree that would fetch anything is
    /// refused before the build (checked in `prepare`, not by the child).
    pub no_remote_bases: bool,
    /// Whether the build runs under Landlock (`--render-sandbox`).
    pub sandbox: SandboxMode,
}

impl Default for KustomizeCommand {
    fn default() -> Self {
        Self::parse(DEFAULT_KUSTOMIZE).unwrap_or_else(|_| Self {
            program: "kubectl".into(),
            args: vec!["kustomize".into()],
            timeout: DEFAULT_RENDER_TIMEOUT,
            max_output: DEFAULT_MAX_RENDER_BYTES,
            no_remote_bases: false,
            sandbox: SandboxMode::Auto,
        })
    }
}

/// Words in kustomize's stderr that say a remote base could not be fetched: the network, DNS
/// or the git server failed, not the tree, so the same revision may build at the next try.
/// kustomize's own text for an unreachable base: `Get "https://…": dial tcp …: connection
/// refused`, `failed to run '/usr/bin/git fetch …': fatal: unable to access …`.
const REMOTE_FETCH_FAILURES: &[&str] = &[
    "dial tcp",
    "no such host",
    "connection refused",
    "connection reset",
    "i/o timeout",
    "tls handshake timeout",
    "context deadline exceeded",
    "could not resolve host",
    "couldn't connect to server",
    "unable to access '",
    "git fetch",
    "git clone",
    "git init",
    "git checkout",
    "git submodule",
];

/// Whether kustomize's stderr says it failed fetching a remote base (see
/// [`REMOTE_FETCH_FAILURES`]): a failure to retry, not input to refuse.
pub fn is_remote_fetch_failure(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    REMOTE_FETCH_FAILURES.iter().any(|w| lower.contains(w))
}

impl KustomizeCommand {
    /// Parses a command line split on whitespace (no shell quoting: paths with spaces are not
    /// supported), with the default deadline and output cap.
    pub fn parse(command: &str) -> Result<Self, RenderError> {
        let mut words = command.split_whitespace().map(str::to_string);
        let program = words.next().ok_or_else(|| RenderError::BadCommand {
            command: command.to_string(),
        })?;
        Ok(Self {
            program,
            args: words.collect(),
            timeout: DEFAULT_RENDER_TIMEOUT,
            max_output: DEFAULT_MAX_RENDER_BYTES,
            no_remote_bases: false,
            sandbox: SandboxMode::Auto,
        })
    }

    /// The same command under another deadline (`--render-timeout`).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same command under another output cap (`--max-render-size`).
    pub fn with_max_output(mut self, max_output: u64) -> Self {
        self.max_output = max_output;
        self
    }

    /// The same command refusing remote bases (`--no-remote-bases`).
    pub fn with_no_remote_bases(mut self, no_remote_bases: bool) -> Self {
        self.no_remote_bases = no_remote_bases;
        self
    }

    /// The same command under another sandbox mode (`--render-sandbox`).
    pub fn with_sandbox(mut self, sandbox: SandboxMode) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The sandbox this command's builds run in on this kernel.
    pub fn sandbox_status(&self) -> SandboxStatus {
        SandboxStatus::current(self.sandbox)
    }

    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Builds `dir`, returning kustomize's YAML stream, with `dir` as the only tree the
    /// sandbox lets it read. `shown` names the directory in errors.
    pub async fn build(&self, dir: &Path, shown: &str) -> Result<String, RenderError> {
        self.build_within(dir, dir, shown).await
    }

    /// Builds `dir` (inside the artifact `root`), returning kustomize's YAML stream. Under the
    /// sandbox the build reads only `root` (and system paths) and writes only its scratch
    /// directory. `shown` names the directory in errors.
    pub async fn build_within(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
    ) -> Result<String, RenderError> {
        let spawn_error = |error: std::io::Error| RenderError::KustomizeSpawn {
            command: self.display(),
            error,
        };
        let status = self.sandbox_status();
        tracing::debug!(
            render_sandbox = status.mode.as_str(),
            active = status.active,
            landlock_abi = status.abi,
            enforced = status.enforcement.as_str(),
            dir = shown,
            "kustomize build"
        );
        if status.check().is_err() {
            return Err(spawn_error(std::io::Error::other(
                sandbox::SandboxError::Unavailable,
            )));
        }
        // The child's home, temporary and config directories; the one place it may write.
        let scratch = tempfile::Builder::new()
            .prefix("flux-converger-build-")
            .tempdir()
            .map_err(|error| RenderError::Io {
                context: "creating the build's scratch directory".into(),
                error,
            })?;
        let path = std::env::var_os("PATH");
        // The child runs from its scratch directory, so a relative `dir` is made absolute.
        let dir = std::path::absolute(dir).map_err(spawn_error)?;
        let root = std::path::absolute(root).map_err(spawn_error)?;
        let program =
            sandbox::resolve_program(&self.program, path.as_deref()).ok_or_else(|| {
                spawn_error(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} not found on PATH", self.program),
                ))
            })?;
        let mut command = tokio::process::Command::new(&program);
        command
            .arg0(&self.program)
            .args(&self.args)
            .arg(&dir)
            .env_clear()
            .envs(sandbox::child_env(scratch.path(), path.as_deref()))
            .current_dir(scratch.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group, so a kill reaches the git processes it started too.
        command.process_group(0);
        if status.active {
            let canonical = std::fs::canonicalize(&program).unwrap_or_else(|_| program.clone());
            let ruleset = sandbox::build_ruleset(&root, &canonical, scratch.path())
                .map_err(|e| spawn_error(std::io::Error::other(e)))?;
            if let Some(ruleset) = ruleset {
                use std::os::fd::AsRawFd as _;
                let fd = ruleset.as_raw_fd();
                // SAFETY: the closure runs in the forked child before exec, where only
                // async-signal-safe calls are sound: `sandbox::enter` makes two system calls
                // and reads errno, allocating nothing. It owns the ruleset descriptor (kept
                // open until the command is dropped; close-on-exec, so the renderer never
                // holds it).
                unsafe {
                    command.pre_exec(move || {
                        let _owned = &ruleset;
                        sandbox::enter(fd)
                    });
                }
            }
        }
        let spawned = command.spawn();
        // Closes the parent's copy of the ruleset descriptor now.
        drop(command);
        let mut child = spawned.map_err(spawn_error)?;
        let group = child.id();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            kill_group(group);
            return Err(RenderError::KustomizeSpawn {
                command: self.display(),
                error: std::io::Error::other("no pipe to the process"),
            });
        };
        let finished = tokio::time::timeout(self.timeout, async {
            let (out, err) = tokio::join!(
                read_capped(stdout, self.max_output, group),
                read_kept(stderr, STDERR_KEPT)
            );
            let status = child.wait().await;
            (out, err, status)
        })
        .await;
        let io = |error: std::io::Error| RenderError::Io {
            context: format!("reading the output of `{}`", self.display()),
            error,
        };
        let Ok((out, err, status)) = finished else {
            kill_group(group);
            let _ = child.kill().await;
            return Err(RenderError::KustomizeTimeout {
                command: self.display(),
                dir: shown.to_string(),
                after: self.timeout,
            });
        };
        let Some(stdout) = out.map_err(io)? else {
            let _ = child.wait().await;
            return Err(RenderError::KustomizeOutputTooLarge {
                command: self.display(),
                dir: shown.to_string(),
                limit: self.max_output,
            });
        };
        let stderr = err.map_err(io)?;
        let status = status.map_err(io)?;
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
            return Err(match status.code() {
                Some(code) => RenderError::KustomizeFailed {
                    command: self.display(),
                    dir: shown.to_string(),
                    status: format!("exit {code}"),
                    remote: is_remote_fetch_failure(&stderr),
                    stderr,
                },
                None => RenderError::KustomizeKilled {
                    command: self.display(),
                    dir: shown.to_string(),
                    signal: signal_of(&status),
                    stderr,
                },
            });
        }
        String::from_utf8(stdout).map_err(|e| RenderError::Output {
            message: format!("kustomize output is not UTF-8: {e}"),
        })
    }
}

/// Reads all of `reader` unless it holds more than `max` bytes: then kills the process group
/// (nothing more of it is wanted) and returns `None`.
async fn read_capped(
    mut reader: impl AsyncRead + Unpin,
    max: u64,
    group: Option<u32>,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Some(out));
        }
        if out.len() as u64 + n as u64 > max {
            kill_group(group);
            return Ok(None);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Reads all of `reader`, keeping the first `kept` bytes.
async fn read_kept(mut reader: impl AsyncRead + Unpin, kept: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 8 * 1024];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok(out);
        }
        let room = kept.saturating_sub(out.len()).min(n);
        out.extend_from_slice(&chunk[..room]);
    }
}

/// SIGKILL to the process group the build leads (`None`: it has already been reaped).
fn kill_group(group: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = group.and_then(|p| libc::pid_t::try_from(p).ok())
        && pid > 0
    {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = group;
}

fn signal_of(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return format!("signal {signal}");
        }
    }
    let _ = status;
    "a signal".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_by_table() {
        assert_eq!(
            KustomizeCommand::parse(DEFAULT_KUSTOMIZE).unwrap(),
            KustomizeCommand {
                program: "kubectl".into(),
                args: vec![
                    "kustomize".into(),
                    "--load-restrictor=LoadRestrictionsNone".into()
                ],
                timeout: DEFAULT_RENDER_TIMEOUT,
                max_output: DEFAULT_MAX_RENDER_BYTES,
                no_remote_bases: false,
                sandbox: SandboxMode::Auto,
            }
        );
        assert_eq!(
            KustomizeCommand::parse("  kustomize   build ")
                .unwrap()
                .args,
            vec!["build".to_string()]
        );
        assert!(KustomizeCommand::parse("   ").is_err());
    }

    #[test]
    fn remote_fetch_failures_by_table() {
        for (stderr, remote) in [
            // kubectl kustomize v5.5 on an unreachable https base (git first, then plain HTTP).
            (
                "accumulating resources: accumulation err='accumulating resources from 'https://127.0.0.1:1/org/repo//base?ref=main': Get \"https://127.0.0.1:1/org/repo//base?ref=main\": dial tcp 127.0.0.1:1: connect: connection refused': failed to run '/usr/bin/git fetch --depth=1 https://127.0.0.1:1/org/repo main': fatal: unable to access 'https://127.0.0.1:1/org/repo/': Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server\n: exit status 128",
                true,
            ),
            (
                "accumulating resources from 'https://git.example/x.yaml': Get \"https://git.example/x.yaml\": dial tcp: lookup git.example: no such host",
                true,
            ),
            (
                "failed to run '/usr/bin/git fetch --depth=1 https://github.com/org/repo main': fatal: could not read Username",
                true,
            ),
            // The tree itself: no retry fixes these.
            (
                "accumulating resources: accumulation err='accumulating resources from 'missing.yaml': evalsymlink failure on '/tmp/a/missing.yaml' : lstat /tmp/a/missing.yaml: no such file or directory'",
                false,
            ),
            (
                "map[string]interface {}(nil): yaml: line 3: mapping values are not allowed in this context",
                false,
            ),
            ("", false),
        ] {
            assert_eq!(is_remote_fetch_failure(stderr), remote, "{stderr}");
        }
    }
}
