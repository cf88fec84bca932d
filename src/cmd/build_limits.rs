//! The bounds on the kustomize build, as flags: `render` takes them and `serve` flattens the
//! same struct, so a render by hand fails where the service's would.

use std::time::Duration;

use flux_converger::flux::render::sandbox::SandboxMode;
use flux_converger::flux::render::{DEFAULT_RENDER_TIMEOUT, KustomizeCommand};

use super::artifact_limits::parse_size;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Build limits")]
pub struct BuildLimitArgs {
    /// How long `kustomize build` may run before it is killed (kustomize-controller's default
    /// `spec.timeout`).
    #[arg(long, value_name = "DURATION", env = "FLUX_CONVERGER_RENDER_TIMEOUT",
          default_value = "2m", value_parser = humantime::parse_duration)]
    pub render_timeout: Duration,
    /// Maximum size of kustomize's output; the build is killed past it [default: the value of
    /// --max-unpacked-size].
    #[arg(long, value_name = "SIZE", env = "FLUX_CONVERGER_MAX_RENDER_SIZE", value_parser = parse_size)]
    pub max_render_size: Option<u64>,
    /// Refuse remote bases, resources, components, plugin configs and helm chart repos before
    /// anything is fetched (kustomize-controller's flag): all resources must refer to local
    /// files included in the source artifact.
    /// Bare, `=true` or `=false`, as pflag takes kustomize-controller's.
    #[arg(long, env = "FLUX_CONVERGER_NO_REMOTE_BASES", num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_remote_bases: bool,
    /// Run kustomize under a Landlock sandbox (reads only the artifact root and system
    /// paths, writes only a scratch directory): `auto` where the kernel offers it, `off`, or
    /// `required` (refuse to start without it).
    #[arg(long, value_name = "MODE", env = "FLUX_CONVERGER_RENDER_SANDBOX",
          default_value = "auto", value_parser = ["auto", "off", "required"])]
    pub render_sandbox: String,
}

impl Default for BuildLimitArgs {
    fn default() -> Self {
        Self {
            render_timeout: DEFAULT_RENDER_TIMEOUT,
            max_render_size: None,
            no_remote_bases: false,
            render_sandbox: "auto".into(),
        }
    }
}

impl BuildLimitArgs {
    /// `command` under these bounds; `unpacked` is `--max-unpacked-size`, the output cap's
    /// default: a render is never allowed more than the tree it is built from.
    pub fn apply(
        &self,
        command: KustomizeCommand,
        unpacked: u64,
    ) -> Result<KustomizeCommand, String> {
        if self.render_timeout.is_zero() {
            return Err("--render-timeout must be positive".into());
        }
        let max = self.max_render_size.unwrap_or(unpacked);
        if max == 0 {
            return Err("--max-render-size must be positive".into());
        }
        let sandbox: SandboxMode = self.render_sandbox.parse()?;
        let command = command
            .with_timeout(self.render_timeout)
            .with_max_output(max)
            .with_no_remote_bases(self.no_remote_bases)
            .with_sandbox(sandbox);
        // `required` on a kernel without Landlock: refused here, at start (exit 2).
        if sandbox == SandboxMode::Required {
            command.sandbox_status().check()?;
        }
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        limits: BuildLimitArgs,
    }

    #[test]
    fn build_limits_by_table() {
        let unpacked = 100 << 20;
        for (args, want) in [
            (&[][..], Ok((Duration::from_secs(120), 100 << 20))),
            (
                &["--render-timeout", "5s", "--max-render-size", "1Mi"][..],
                Ok((Duration::from_secs(5), 1 << 20)),
            ),
            (
                &["--render-timeout", "0s"][..],
                Err("--render-timeout must be positive"),
            ),
            (
                &["--max-render-size", "0"][..],
                Err("--max-render-size must be positive"),
            ),
        ] {
            let cli =
                Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
            let got = cli
                .limits
                .apply(KustomizeCommand::default(), unpacked)
                .map(|c| (c.timeout, c.max_output));
            assert_eq!(got, want.map_err(String::from), "{args:?}");
        }
        assert!(Cli::try_parse_from(["x", "--max-render-size", "1.5"]).is_err());
        assert!(Cli::try_parse_from(["x", "--render-sandbox", "on"]).is_err());
        for (flag, want) in [("auto", SandboxMode::Auto), ("off", SandboxMode::Off)] {
            let cli = Cli::try_parse_from(["x", "--render-sandbox", flag]).unwrap();
            let got = cli.limits.apply(KustomizeCommand::default(), unpacked);
            assert_eq!(got.map(|c| c.sandbox), Ok(want), "{flag}");
        }
    }
}
