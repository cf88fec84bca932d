//! The `flux-converger` binary: parse the command line, set up logging, run one command.
//!
//! Every command lives in `cmd::<name>` and returns an [`cmd::Exit`]; errors carry their
//! exit code (2 bad input, 1 failure) so the contract of docs/cli.md is kept in one place.

mod cmd;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "flux-converger",
    version,
    about = "Lets a Flux Kustomization carry a grown StatefulSet volume size"
)]
struct Cli {
    /// Log format: `json` for log pipelines, like Flux's controllers (`--log-encoding` works too).
    #[arg(long, alias = "log-encoding", global = true, help_heading = "Logging (global)", value_enum, default_value_t = LogFormat::Text, env = "FLUX_CONVERGER_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `flux_converger=debug`.
    /// Without it, `RUST_LOG` is honoured, else `info`.
    #[arg(
        long,
        global = true,
        help_heading = "Logging (global)",
        env = "FLUX_CONVERGER_LOG_LEVEL"
    )]
    log_level: Option<String>,
    #[command(flatten)]
    kube: cmd::KubeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    #[value(alias = "console")]
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Plan the converge of the desired StatefulSets against a cluster state read from files (offline, pure).
    Plan(cmd::plan::Args),
    /// Converge the desired StatefulSets against the current kube context.
    Converge(cmd::converge::Args),
    /// Render a Kustomization's revision as kustomize-controller would, or a HelmRelease's
    /// newest Helm release record.
    // Boxed, as `serve`: its Kustomization and HelmRelease inputs make it large.
    Render(Box<cmd::render::Args>),
    /// Serve: converge each handled Kustomization's new revision before Flux applies it.
    // Boxed: its flags make it much larger than the other commands.
    Serve(Box<cmd::serve::Args>),
}

/// The log filter: `--log-level` (or its env var) wins; else `RUST_LOG`, as every Rust tool
/// reads it; else `info`. A filter that does not parse is bad input, not silently ignored.
fn log_filter(level: Option<&str>) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    use tracing_subscriber::EnvFilter;
    let (text, from) = match level {
        Some(level) => (level.to_owned(), "--log-level"),
        None => match std::env::var(EnvFilter::DEFAULT_ENV) {
            Ok(text) if !text.trim().is_empty() => (text, "RUST_LOG"),
            _ => ("info".to_owned(), "the default"),
        },
    };
    EnvFilter::try_new(&text)
        .map_err(|e| anyhow::anyhow!("invalid log filter {text:?} from {from}: {e}"))
}

fn init_logging(format: LogFormat, level: Option<&str>) -> anyhow::Result<()> {
    let filter = log_filter(level)?;
    // Logs go to stderr: stdout carries the command's output (plans, renders) for pipes.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Every line masked of the values substituted from Secrets (flux_converger::redact).
        .with_writer(flux_converger::redact::RedactingWriter::new(
            std::io::stderr,
        ))
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}

fn main() -> ExitCode {
    // Output piped into `head` or `less` ends with a quiet exit, like any Unix tool, not a
    // panic from `println!` on a closed pipe (Rust ignores SIGPIPE by default).
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's --help/--version are successes; usage errors are bad input (2).
            return if e.use_stderr() {
                ExitCode::from(cmd::Exit::BadInput as u8)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Err(e) = init_logging(cli.log_format, cli.log_level.as_deref()) {
        eprintln!("error: {e:#}");
        return ExitCode::from(cmd::Exit::BadInput as u8);
    }
    flux_converger::tls::install_crypto_provider();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(cmd::Exit::Failure as u8);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Plan(args) => cmd::plan::run(args, cli.kube).await,
            Command::Converge(args) => cmd::converge::run(args, cli.kube).await,
            Command::Render(args) => cmd::render::run(*args, cli.kube).await,
            Command::Serve(args) => cmd::serve::run(*args, cli.kube).await,
        }
    });
    match result {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(e) => {
            // A render's error may quote a value substituted from a Secret (a serde or API
            // server text): masked as in the logs (flux_converger::redact).
            let text = flux_converger::redact::registry()
                .all()
                .redact(&format!("{e:#}"));
            eprintln!("error: {text}");
            ExitCode::from(cmd::exit_code_of(&e) as u8)
        }
    }
}
