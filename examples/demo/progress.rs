//! What the newcomer reads: one line per thing that happened, each a check the walk made
//! against the cluster or the service, never a claim it assumed. A failed check is printed
//! in place and counted, so `--no-wait` can exit non-zero naming every step that did not happen.

use std::io::IsTerminal;
use std::time::Instant;

pub struct Progress {
    started: Instant,
    failures: Vec<String>,
    color: bool,
}

impl Progress {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            failures: Vec::new(),
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// A section heading (a revision, the setup).
    pub fn section(&self, title: &str) {
        println!();
        println!("{}", self.paint("1", title));
    }

    /// A part of a section (one Kustomization of the revision).
    pub fn sub(&self, title: &str) {
        println!(" {} {}", self.paint("1", "▸"), self.paint("1", title));
    }

    /// Something that was done (published, posted), with no check behind it.
    pub fn did(&self, text: &str) {
        println!("  {} {text}", self.paint("36", "→"));
    }

    /// A detail under the previous line.
    pub fn detail(&self, text: &str) {
        println!("      {}", self.paint("2", text));
    }

    /// A check: printed as passed or failed; a failure is counted.
    pub fn check(&mut self, ok: bool, text: &str, why_not: impl FnOnce() -> String) -> bool {
        let t = self.elapsed();
        if ok {
            println!("  {} {text} {}", self.paint("32", "✓"), self.paint("2", &t));
        } else {
            let why = why_not();
            println!("  {} {text}: {}", self.paint("31", "✗"), why);
            self.failures.push(format!("{text}: {why}"));
        }
        ok
    }

    pub fn fail(&mut self, text: &str, why: String) {
        self.check(false, text, || why);
    }

    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    fn elapsed(&self) -> String {
        format!("[{:.1}s]", self.started.elapsed().as_secs_f64())
    }
}
