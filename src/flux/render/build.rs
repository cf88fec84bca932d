//! The kustomize build, by an external binary.
//!
//! kustomize-controller links kustomize; the converger runs one (`kubectl kustomize` by default,
//! or a `kustomize build`), with load restrictions off as Flux builds. Its stderr is quoted on
//! failure since that is where kustomize explains what is wrong with the tree.

use std::path::Path;

use super::RenderError;

/// The default build command: kubectl's built-in kustomize, load restrictions off like Flux.
pub const DEFAULT_KUSTOMIZE: &str = "kubectl kustomize --load-restrictor=LoadRestrictionsNone";

/// How to run kustomize: a program and its arguments; the directory is appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizeCommand {
    pub program: String,
    pub args: Vec<String>,
}

impl Default for KustomizeCommand {
    fn default() -> Self {
        Self::parse(DEFAULT_KUSTOMIZE).unwrap_or_else(|_| Self {
            program: "kubectl".into(),
            args: vec!["kustomize".into()],
        })
    }
}

impl KustomizeCommand {
    /// Parses a command line split on whitespace (no shell quoting: paths with spaces are not supported).
    pub fn parse(command: &str) -> Result<Self, RenderError> {
        let mut words = command.split_whitespace().map(str::to_string);
        let program = words.next().ok_or_else(|| RenderError::BadCommand {
            command: command.to_string(),
        })?;
        Ok(Self {
            program,
            args: words.collect(),
        })
    }

    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Builds `dir`, returning kustomize's YAML stream. `shown` names the directory in errors.
    pub async fn build(&self, dir: &Path, shown: &str) -> Result<String, RenderError> {
        let output = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|error| RenderError::KustomizeSpawn {
                command: self.display(),
                error,
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
            return Err(RenderError::KustomizeFailed {
                command: self.display(),
                dir: shown.to_string(),
                status: output
                    .status
                    .code()
                    .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}")),
                stderr,
            });
        }
        String::from_utf8(output.stdout).map_err(|e| RenderError::Output {
            message: format!("kustomize output is not UTF-8: {e}"),
        })
    }
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
                ]
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
}
