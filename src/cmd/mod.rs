//! The CLI commands. Each reads its input, calls the library and prints; exit codes are
//! the contract of docs/cli.md: 0 done/planned, 3 refused, 2 bad input or usage, 1 other failure;
//! `converge --wait-for-volumes` adds 4 (a volume's expansion is infeasible) and 5 (the volumes
//! did not grow by the deadline).

pub mod argocd_flags;
pub mod artifact_limits;
pub mod build_limits;
pub mod converge;
pub mod http_flags;
pub mod listen_addr;
pub mod plan;
pub mod render;
pub mod serve;
pub mod wait_volumes;

/// Process exit codes (docs/cli.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    Done = 0,
    Failure = 1,
    BadInput = 2,
    Refused = 3,
    /// `converge --wait-for-volumes`: a claim's expansion is `infeasible`.
    VolumeInfeasible = 4,
    /// `converge --wait-for-volumes`: a claim had not grown by the deadline.
    VolumesTimedOut = 5,
}

/// Marks an error as the user's input being wrong (exit 2) rather than a failure (exit 1).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BadInput(#[from] pub anyhow::Error);

/// Wraps any error as bad input (exit 2).
pub fn bad_input(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.into()))
}

/// The exit code an error maps to: 2 when any cause in its chain is [`BadInput`], else 1.
pub fn exit_code_of(e: &anyhow::Error) -> Exit {
    if e.chain().any(|c| c.is::<BadInput>()) {
        Exit::BadInput
    } else {
        Exit::Failure
    }
}

/// kubectl's connection flags, global on every command (`--kubeconfig`, `--context`, `-n`), so
/// an operator's habits work. `main` flattens this into the top-level parser and hands it to
/// each command.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Cluster options (global)")]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: `$KUBECONFIG`, `~/.kube/config`, or in-cluster).
    #[arg(long, global = true, env = "FLUX_CONVERGER_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, env = "FLUX_CONVERGER_CONTEXT")]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace; for `serve`, the pod's namespace).
    #[arg(long, short = 'n', global = true, env = "FLUX_CONVERGER_NAMESPACE")]
    pub namespace: Option<String>,
}

impl KubeArgs {
    /// The client configuration these flags select: the kubeconfig (with `--context`) when one
    /// is given or found, else the in-cluster service account.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        use anyhow::Context as _;
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("kubeconfig {}", path.display()))
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .context("cannot load the kubeconfig for --context"),
            None => kube::Config::infer().await.context(
                "cannot build a Kubernetes client from the kubeconfig or the in-cluster config",
            ),
        }
    }

    /// The namespace for objects without one in a command that never talks to a cluster
    /// (`plan`, offline `render`): `-n`, else the kubeconfig context's namespace when a
    /// kubeconfig is readable, else `default`. An offline command never fails for want of a
    /// kubeconfig, so an unreadable one is only logged.
    pub fn offline_namespace(&self) -> String {
        if let Some(ns) = &self.namespace {
            return ns.clone();
        }
        let read = match &self.kubeconfig {
            Some(path) => kube::config::Kubeconfig::read_from(path),
            None => kube::config::Kubeconfig::read(),
        };
        match read {
            Ok(kubeconfig) => context_namespace(&kubeconfig, self.context.as_deref())
                .unwrap_or_else(|| "default".to_owned()),
            Err(e) => {
                tracing::debug!(error = %e, "no readable kubeconfig: objects without a namespace go to `default`");
                "default".to_owned()
            }
        }
    }

    /// A client for [`KubeArgs::config`].
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        use anyhow::Context as _;
        let config = self.config().await?;
        flux_converger::wire::kube_client(config).context("cannot build a Kubernetes client")
    }
}

/// The namespace of `context` (or of the current context) in `kubeconfig`, as kubectl picks it.
pub fn context_namespace(
    kubeconfig: &kube::config::Kubeconfig,
    context: Option<&str>,
) -> Option<String> {
    let name = context.or(kubeconfig.current_context.as_deref())?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|ns| !ns.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_namespace_by_table() {
        let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "a",
            "contexts": [
                {"name": "a", "context": {"cluster": "c", "namespace": "team-a"}},
                {"name": "b", "context": {"cluster": "c"}},
                {"name": "e", "context": {"cluster": "c", "namespace": ""}},
            ],
        }))
        .expect("kubeconfig");
        for (context, expected) in [
            (None, Some("team-a")),
            (Some("a"), Some("team-a")),
            (Some("b"), None),
            (Some("e"), None),
            (Some("missing"), None),
        ] {
            assert_eq!(
                context_namespace(&kubeconfig, context).as_deref(),
                expected,
                "{context:?}"
            );
        }
        let no_current = kube::config::Kubeconfig::default();
        assert_eq!(context_namespace(&no_current, None), None);
    }
}
