//! The second line around the kustomize build: a Landlock sandbox and a cleared environment.
//!
//! The lexical check ([`super::confine`]) refuses every path it knows a kustomization can name
//! outside the artifact root; this module does not depend on that list being whole. Where the
//! kernel offers Landlock (Linux ≥ 5.13), the build process is restricted before it execs so it
//! can read only the artifact root, the renderer binary and the system paths a renderer needs
//! ([`SYSTEM_READ`]), and write only a scratch directory made for that one build. An outside
//! path then fails with `permission denied` whatever field named it, as kustomize-controller's
//! in-memory filesystem refuses it.
//!
//! How the restriction gets into the child: building a ruleset allocates and opens files, which
//! must not happen between `fork` and `exec` (the parent is multi-threaded; only
//! async-signal-safe calls are allowed there). So the parent builds the ruleset with the
//! `landlock` crate and keeps its file descriptor; the child, in `pre_exec`, makes two system
//! calls only: `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self(fd)` ([`enter`]). The
//! descriptor is close-on-exec, so it does not reach the renderer, and the domain is inherited
//! by everything the renderer starts (git for a remote base).
//!
//! The network is not restricted: a remote base needs it (`--no-remote-bases` is the guard
//! for that). Signals and abstract UNIX sockets are scoped to the build (Landlock ABI 6) where
//! the kernel has them, so the build cannot signal the service or reach a socket it listens on.

use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, LandlockStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError,
    RulesetStatus, Scope, path_beneath_rules,
};

/// The Landlock ABI whose rights the sandbox asks for (filesystem rights of ABI 5, signal and
/// abstract-socket scopes of ABI 6). A newer kernel enforces all of them; an older one what
/// it has (best effort, reported as partial).
const TARGET_ABI: ABI = ABI::V6;

/// What a renderer reads besides the tree: the OS image (binaries and libraries, no service
/// or tenant data), the dynamic loader's cache, and what name resolution and TLS read for a
/// remote base. Read and execute only. Paths missing on this host are skipped. Deliberately
/// absent: `/proc` (the service's environment), `/var/run/secrets` (its token), `/tmp` (other
/// builds, downloads), `/etc/gitconfig` (git is told not to read it) and the home directory.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
];

/// Devices a renderer or git opens: `/dev/null` read and write, the random sources read.
const DEVICES_RW: &[&str] = &["/dev/null"];
const DEVICES_READ: &[&str] = &["/dev/zero", "/dev/random", "/dev/urandom"];

/// The PATH a build gets when the service has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `--render-sandbox`: whether the build runs under Landlock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Sandboxed where the kernel offers Landlock, unsandboxed with a warning elsewhere.
    #[default]
    Auto,
    /// Never sandboxed (the environment is still cleared).
    Off,
    /// Sandboxed, or the command refuses to start (exit 2).
    Required,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Off => "off",
            Self::Required => "required",
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            "required" => Ok(Self::Required),
            _ => Err(format!("{s:?}: expected auto, off or required")),
        }
    }
}

/// How much of the requested restriction this kernel enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Every right and scope asked for.
    Full,
    /// Reads and writes outside the allowed paths are refused, some newer rights are not
    /// (e.g. truncate before ABI 3, signal scoping before ABI 6).
    Partial,
    /// Nothing: the kernel has no Landlock, or it is not enabled.
    None,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Partial => "partial",
            Self::None => "none",
        }
    }
}

/// What this kernel gives the sandbox, found once per process by [`kernel`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSupport {
    /// The kernel's Landlock ABI version (0 without Landlock).
    pub abi: i32,
    pub enforcement: Enforcement,
    /// Why nothing is enforced, when nothing is.
    pub reason: Option<String>,
}

/// The sandbox a build runs in under `mode` on this kernel: what the start-up line, the
/// metric and the per-build debug line say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxStatus {
    pub mode: SandboxMode,
    /// Whether builds run under Landlock.
    pub active: bool,
    /// The kernel's Landlock ABI (0 without Landlock), whatever the mode.
    pub abi: i32,
    pub enforcement: Enforcement,
    /// Why builds are not sandboxed, when they are not.
    pub reason: Option<String>,
}

impl SandboxStatus {
    /// `mode` on a kernel that gives `kernel`.
    pub fn of(mode: SandboxMode, kernel: &KernelSupport) -> Self {
        let (active, reason) = match mode {
            SandboxMode::Off => (false, Some("--render-sandbox=off".to_string())),
            SandboxMode::Auto | SandboxMode::Required => (
                kernel.enforcement != Enforcement::None,
                kernel.reason.clone(),
            ),
        };
        Self {
            mode,
            active,
            abi: kernel.abi,
            enforcement: if active {
                kernel.enforcement
            } else {
                Enforcement::None
            },
            reason,
        }
    }

    /// `mode` on this kernel.
    pub fn current(mode: SandboxMode) -> Self {
        Self::of(mode, kernel())
    }

    /// The refusal of `--render-sandbox=required` on a kernel without Landlock.
    pub fn check(&self) -> Result<(), String> {
        if self.mode == SandboxMode::Required && !self.active {
            return Err(format!(
                "--render-sandbox=required: the kernel offers no Landlock sandbox ({}); \
                 use --render-sandbox=auto to build unsandboxed (the lexical check still applies)",
                self.reason.as_deref().unwrap_or("not enforced")
            ));
        }
        Ok(())
    }

    /// Logs the status once, at start: info when active, a warning when not.
    pub fn log_start(&self) {
        if self.active {
            tracing::info!(
                render_sandbox = self.mode.as_str(),
                landlock_abi = self.abi,
                enforced = self.enforcement.as_str(),
                "render sandbox active: kustomize reads only the artifact root and system paths, writes only its scratch directory"
            );
        } else {
            tracing::warn!(
                render_sandbox = self.mode.as_str(),
                landlock_abi = self.abi,
                reason = self.reason.as_deref().unwrap_or(""),
                "render sandbox inactive: kustomize builds unsandboxed (only the lexical check confines it to the artifact root)"
            );
        }
    }
}

/// Why a sandbox could not be set up for a build.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("render sandbox: {0}")]
    Ruleset(#[from] RulesetError),
    #[error("render sandbox: --render-sandbox=required but the kernel offers no Landlock")]
    Unavailable,
}

/// The rights and scopes every build's ruleset handles (what is not granted is refused).
fn ruleset() -> Result<landlock::RulesetCreated, RulesetError> {
    Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET_ABI))?
        .scope(Scope::from_all(TARGET_ABI))?
        .create()
}

/// What this kernel enforces, probed once: a throwaway thread restricts itself with the same
/// handled rights as a build and reports what the `landlock` crate says was enforced. Landlock
/// applies to the calling thread only, so the rest of the process stays unrestricted.
pub fn kernel() -> &'static KernelSupport {
    static KERNEL: OnceLock<KernelSupport> = OnceLock::new();
    KERNEL.get_or_init(|| {
        std::thread::spawn(probe)
            .join()
            .unwrap_or_else(|_| KernelSupport {
                abi: 0,
                enforcement: Enforcement::None,
                reason: Some("the Landlock probe panicked".into()),
            })
    })
}

fn probe() -> KernelSupport {
    let status = match ruleset().and_then(|r| r.restrict_self()) {
        Ok(status) => status,
        Err(e) => {
            return KernelSupport {
                abi: 0,
                enforcement: Enforcement::None,
                reason: Some(e.to_string()),
            };
        }
    };
    let (abi, reason) = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => (kernel_abi.unwrap_or(effective_abi as i32), None),
        LandlockStatus::NotEnabled => (
            0,
            Some("Landlock is built into the kernel but not enabled (boot parameter lsm=)".into()),
        ),
        LandlockStatus::NotImplemented => (
            0,
            Some("the kernel has no Landlock (Linux < 5.13, or built without it)".into()),
        ),
    };
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    };
    KernelSupport {
        abi,
        reason: reason.or_else(|| {
            (enforcement == Enforcement::None).then(|| "Landlock enforced nothing".to_string())
        }),
        enforcement,
    }
}

/// The ruleset of one build, as a descriptor for [`enter`]: read `root`, read and execute
/// `program` and [`SYSTEM_READ`], read and write everything under `scratch`. `None` when the
/// kernel enforces nothing (the caller builds unsandboxed, as `--render-sandbox=auto` says).
pub fn build_ruleset(
    root: &Path,
    program: &Path,
    scratch: &Path,
) -> Result<Option<OwnedFd>, SandboxError> {
    let read_exec = AccessFs::from_read(TARGET_ABI);
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let created = ruleset()?
        .add_rules(path_beneath_rules(SYSTEM_READ, read_exec))?
        .add_rules(path_beneath_rules([program], read_exec))?
        .add_rules(path_beneath_rules([root], read))?
        .add_rules(path_beneath_rules(DEVICES_READ, AccessFs::ReadFile))?
        .add_rules(path_beneath_rules(
            DEVICES_RW,
            AccessFs::from_file(TARGET_ABI) & !AccessFs::Execute,
        ))?
        .add_rules(path_beneath_rules(
            [scratch],
            AccessFs::from_all(TARGET_ABI),
        ))?;
    Ok(created.into())
}

/// In the child between `fork` and `exec`: no new privileges (Landlock requires it of an
/// unprivileged process; it also keeps a setuid binary from escaping), then the ruleset.
/// Two system calls and `errno`: async-signal-safe, no allocation.
pub fn enter(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: prctl(2) with integer arguments; it touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: landlock_restrict_self(2) takes a descriptor and flags; no memory is passed.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0 as libc::c_uint) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The renderer program as an absolute path, found on `path` (the service's PATH) like
/// execvp would: the sandbox allows exactly that file, and the child is started by that path
/// so a PATH lookup in the child cannot pick another.
pub fn resolve_program(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let program = Path::new(program);
    if program.components().count() > 1 || program.is_absolute() {
        return std::path::absolute(program).ok();
    }
    let path = path.unwrap_or(DEFAULT_PATH.as_ref());
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .and_then(|found| std::path::absolute(found).ok())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The build's whole environment: the service's PATH (so kustomize finds git), every home and
/// temporary directory pointed at the scratch directory (nothing is read from the service's
/// home: no kubeconfig, no kustomize plugins, no git credentials), git told to read no system
/// config and never prompt. Nothing else of the service's: no service or cloud credentials,
/// no proxy settings, no `KUBERNETES_SERVICE_*`.
pub fn child_env(scratch: &Path, path: Option<&std::ffi::OsStr>) -> Vec<(&'static str, OsString)> {
    let scratch = scratch.as_os_str().to_os_string();
    let mut kubeconfig = scratch.clone();
    kubeconfig.push("/kubeconfig");
    vec![
        (
            "PATH",
            path.map(ToOwned::to_owned)
                .unwrap_or_else(|| DEFAULT_PATH.into()),
        ),
        ("HOME", scratch.clone()),
        ("TMPDIR", scratch.clone()),
        ("XDG_CONFIG_HOME", scratch.clone()),
        ("XDG_CACHE_HOME", scratch.clone()),
        ("XDG_DATA_HOME", scratch),
        ("KUBECONFIG", kubeconfig),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_TERMINAL_PROMPT", "0".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_table() {
        for (text, want) in [
            ("auto", Ok(SandboxMode::Auto)),
            ("off", Ok(SandboxMode::Off)),
            ("required", Ok(SandboxMode::Required)),
            ("on", Err(())),
            ("", Err(())),
        ] {
            assert_eq!(text.parse::<SandboxMode>().map_err(|_| ()), want, "{text}");
        }
        assert_eq!(SandboxMode::default(), SandboxMode::Auto);
    }

    #[test]
    fn status_by_mode_and_kernel() {
        let full = KernelSupport {
            abi: 7,
            enforcement: Enforcement::Full,
            reason: None,
        };
        let none = KernelSupport {
            abi: 0,
            enforcement: Enforcement::None,
            reason: Some("the kernel has no Landlock".into()),
        };
        for (mode, kernel, active, ok) in [
            (SandboxMode::Auto, &full, true, true),
            (SandboxMode::Required, &full, true, true),
            (SandboxMode::Off, &full, false, true),
            (SandboxMode::Auto, &none, false, true),
            (SandboxMode::Off, &none, false, true),
            (SandboxMode::Required, &none, false, false),
        ] {
            let status = SandboxStatus::of(mode, kernel);
            assert_eq!(status.active, active, "{mode} {kernel:?}");
            assert_eq!(status.check().is_ok(), ok, "{mode} {kernel:?}");
            assert_eq!(status.abi, kernel.abi);
            if !active {
                assert_eq!(status.enforcement, Enforcement::None);
                assert!(status.reason.is_some());
            }
        }
        let refusal = SandboxStatus::of(SandboxMode::Required, &none)
            .check()
            .unwrap_err();
        assert!(refusal.contains("--render-sandbox=required"), "{refusal}");
        assert!(refusal.contains("the kernel has no Landlock"), "{refusal}");
    }

    #[test]
    fn child_env_holds_only_what_the_renderer_needs() {
        let env = child_env(Path::new("/scratch"), Some("/opt/bin:/usr/bin".as_ref()));
        let keys: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "PATH",
                "HOME",
                "TMPDIR",
                "XDG_CONFIG_HOME",
                "XDG_CACHE_HOME",
                "XDG_DATA_HOME",
                "KUBECONFIG",
                "GIT_CONFIG_NOSYSTEM",
                "GIT_TERMINAL_PROMPT"
            ]
        );
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("PATH"), Some("/opt/bin:/usr/bin".into()));
        assert_eq!(get("HOME"), Some("/scratch".into()));
        assert_eq!(get("KUBECONFIG"), Some("/scratch/kubeconfig".into()));
        assert_eq!(
            child_env(Path::new("/s"), None)[0].1,
            OsString::from(DEFAULT_PATH)
        );
    }

    #[test]
    fn programs_resolve_on_path_by_table() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let exe = bin.join("renderer");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("plain"), "").unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([dir.path().join("missing"), bin.clone()]).unwrap();
        for (program, want) in [
            ("renderer", Some(exe.clone())),
            // Not executable: execvp skips it too.
            ("plain", None),
            ("absent", None),
            (exe.to_str().unwrap(), Some(exe.clone())),
        ] {
            assert_eq!(resolve_program(program, Some(&path)), want, "{program}");
        }
    }

    #[test]
    fn this_kernel_is_probed_once_and_consistently() {
        let first = kernel();
        assert!(std::ptr::eq(first, kernel()));
        assert_eq!(
            first.enforcement == Enforcement::None,
            first.reason.is_some()
        );
        // The probe restricted a thread of its own, not this one: reading outside any
        // allowed path still works here.
        assert!(std::fs::read_dir(env!("CARGO_MANIFEST_DIR")).is_ok());
    }
}
