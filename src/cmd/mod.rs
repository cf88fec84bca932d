//! The CLI commands. Each reads its input, calls the library and prints; exit codes are
//! the contract of DESIGN.md §5: 0 done/planned, 3 refused, 2 bad input or usage, 1 other failure.

pub mod converge;
pub mod plan;
pub mod render;

/// Process exit codes (DESIGN.md §5).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    Done = 0,
    Failure = 1,
    BadInput = 2,
    Refused = 3,
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

#[allow(dead_code)] // wired into every command by the CLI-conventions change
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

    /// A client for [`KubeArgs::config`].
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        use anyhow::Context as _;
        let config = self.config().await?;
        kube::Client::try_from(config).context("cannot build a Kubernetes client")
    }
}
