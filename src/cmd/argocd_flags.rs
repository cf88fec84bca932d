//! The Argo CD flags of `serve` (`--argocd-*`, docs/argocd.md): with `--argocd-server` the
//! service also gates Argo CD Applications that opt in.

use std::path::PathBuf;

use flux_converger::argocd::api::{ApiOptions, ArgoCdApi};
use flux_converger::service::application::{ArgoCdConfig, DEFAULT_NAMESPACE};

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Argo CD")]
pub struct ArgoCdArgs {
    /// Argo CD's API server (`https://host[:port][/root-path]`), where the desired StatefulSets
    /// of an Application are read (its managed resources). Without it no Application is gated.
    #[arg(long, value_name = "URL", env = "FLUX_CONVERGER_ARGOCD_SERVER")]
    pub argocd_server: Option<String>,
    /// File holding the bearer token for Argo CD's API server (a project-role or local-account
    /// token allowed `applications, get` only); read at each call.
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_ARGOCD_TOKEN_FILE")]
    pub argocd_token_file: Option<PathBuf>,
    /// PEM file of the CA that signed Argo CD's API server certificate: the only roots trusted
    /// when set (default: the platform's). The certificate is always verified.
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_ARGOCD_CA_FILE")]
    pub argocd_ca_file: Option<PathBuf>,
    /// Namespaces whose Applications are watched (comma-separated or repeated); the first is
    /// Argo CD's own, where its AppProjects and `argocd-cm` are read.
    #[arg(long, value_name = "NS", value_delimiter = ',', default_value = DEFAULT_NAMESPACE,
          env = "FLUX_CONVERGER_ARGOCD_NAMESPACES")]
    pub argocd_namespaces: Vec<String>,
    /// File holding the bearer token `POST /hook/argocd` requires (Argo CD's notifications);
    /// without it that route is not served.
    #[arg(
        long,
        value_name = "FILE",
        env = "FLUX_CONVERGER_ARGOCD_HOOK_TOKEN_FILE"
    )]
    pub argocd_hook_token_file: Option<PathBuf>,
}

impl ArgoCdArgs {
    /// The lane's configuration (`None` without `--argocd-server`), checked: an https URL, a
    /// readable non-empty token file, a CA file holding a certificate, a hook token. Every
    /// mistake is the caller's (exit 2).
    pub fn config(&self) -> Result<Option<ArgoCdConfig>, String> {
        let Some(server) = self.argocd_server.clone().filter(|s| !s.is_empty()) else {
            for (set, flag) in [
                (self.argocd_token_file.is_some(), "--argocd-token-file"),
                (self.argocd_ca_file.is_some(), "--argocd-ca-file"),
                (
                    self.argocd_hook_token_file.is_some(),
                    "--argocd-hook-token-file",
                ),
            ] {
                if set {
                    return Err(format!("{flag} needs --argocd-server"));
                }
            }
            return Ok(None);
        };
        let token_file = self
            .argocd_token_file
            .clone()
            .ok_or("--argocd-server needs --argocd-token-file")?;
        match std::fs::read_to_string(&token_file) {
            Ok(text) if !text.trim().is_empty() => {}
            Ok(_) => {
                return Err(format!(
                    "--argocd-token-file {}: the file is empty",
                    token_file.display()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "--argocd-token-file {}: cannot read: {e}",
                    token_file.display()
                ));
            }
        }
        let namespaces: Vec<String> = self
            .argocd_namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if namespaces.is_empty() {
            return Err("--argocd-namespaces names no namespace".into());
        }
        let hook_token = match &self.argocd_hook_token_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!(
                        "--argocd-hook-token-file {}: cannot read: {e}",
                        path.display()
                    )
                })?;
                let token = text.trim_end_matches(['\r', '\n']).to_string();
                if token.is_empty() {
                    return Err(format!(
                        "--argocd-hook-token-file {}: the file is empty",
                        path.display()
                    ));
                }
                Some(token)
            }
        };
        // The URL and the CA file as the client will use them (no call is made).
        flux_converger::tls::install_crypto_provider();
        ArgoCdApi::new(&ApiOptions {
            server: server.clone(),
            token_file: token_file.clone(),
            ca_file: self.argocd_ca_file.clone(),
            timeout: std::time::Duration::from_secs(30),
            max_body: 1,
        })
        .map_err(|e| e.to_string())?;
        Ok(Some(ArgoCdConfig {
            namespaces,
            server,
            token_file,
            ca_file: self.argocd_ca_file.clone(),
            hook_token,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        argocd: ArgoCdArgs,
    }

    fn parse(args: &[&str]) -> Result<Option<ArgoCdConfig>, String> {
        let mut all = vec!["test"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .argocd
            .config()
    }

    #[test]
    fn argocd_flags_table() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let hook = dir.path().join("hook");
        std::fs::write(&hook, "h00k\n").unwrap();
        let (token, empty, hook) = (
            token.to_str().unwrap().to_string(),
            empty.to_str().unwrap().to_string(),
            hook.to_str().unwrap().to_string(),
        );
        let server = "https://argocd-server.argocd.svc";
        // Off without a server.
        assert!(parse(&[]).unwrap().is_none());
        let c = parse(&["--argocd-server", server, "--argocd-token-file", &token])
            .unwrap()
            .unwrap();
        assert_eq!(c.namespaces, ["argocd"]);
        assert_eq!(c.own_namespace(), "argocd");
        assert!(c.hook_token.is_none());
        // Comma-separated or repeated; the first is Argo CD's own.
        for args in [
            vec![
                "--argocd-namespaces",
                "argocd,team-a",
                "--argocd-namespaces",
                "team-b",
            ],
            vec!["--argocd-namespaces=argocd,team-a,team-b"],
        ] {
            let mut all = vec!["--argocd-server", server, "--argocd-token-file", &token];
            all.extend(args);
            let c = parse(&all).unwrap().unwrap();
            assert_eq!(c.namespaces, ["argocd", "team-a", "team-b"]);
        }
        let c = parse(&[
            "--argocd-server",
            server,
            "--argocd-token-file",
            &token,
            "--argocd-hook-token-file",
            &hook,
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.hook_token.as_deref(), Some("h00k"));
        assert!(!format!("{c:?}").contains("h00k"), "{c:?}");
        for (args, words) in [
            (
                vec!["--argocd-token-file", token.as_str()],
                "needs --argocd-server",
            ),
            (vec!["--argocd-server", server], "needs --argocd-token-file"),
            (
                vec![
                    "--argocd-server",
                    server,
                    "--argocd-token-file",
                    "/nonexistent",
                ],
                "cannot read",
            ),
            (
                vec![
                    "--argocd-server",
                    server,
                    "--argocd-token-file",
                    empty.as_str(),
                ],
                "is empty",
            ),
            (
                vec![
                    "--argocd-server",
                    "http://argocd-server.argocd.svc",
                    "--argocd-token-file",
                    token.as_str(),
                ],
                "not an https URL",
            ),
            (
                vec![
                    "--argocd-server",
                    server,
                    "--argocd-token-file",
                    token.as_str(),
                    "--argocd-ca-file",
                    empty.as_str(),
                ],
                "CA file",
            ),
        ] {
            let error = parse(&args).unwrap_err();
            assert!(error.contains(words), "{args:?}: {error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
