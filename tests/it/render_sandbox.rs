//! The render sandbox (issue 27 item 1, second line): the kustomize child reads only the
//! artifact root and system paths, writes only its scratch directory, and sees none of the
//! service's environment. Real builds on this kernel; skipped, with the reason printed, only
//! where the kernel has no Landlock.

use std::path::Path;

use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::sandbox::{self, SandboxMode};

const SENTINEL: &str = "sentinel-7f3a9c-outside-the-root";

/// Whether this kernel sandboxes; prints why not when it does not.
fn landlock() -> bool {
    let kernel = sandbox::kernel();
    if kernel.enforcement == sandbox::Enforcement::None {
        eprintln!(
            "skipped: the kernel offers no Landlock ({})",
            kernel.reason.as_deref().unwrap_or("")
        );
        return false;
    }
    true
}

fn kubectl() -> Option<KustomizeCommand> {
    let command = KustomizeCommand::default();
    if sandbox::resolve_program(&command.program, std::env::var_os("PATH").as_deref()).is_none() {
        eprintln!("skipped: no kubectl on PATH");
        return None;
    }
    Some(command)
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn config_map(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  stolen: {SENTINEL}\n"
    )
}

/// Trees that read `target` through fields kubectl kustomize follows, built directly (no
/// `prepare`, so no lexical check): the sandbox alone must stop them. Each is its files.
fn trees(target: &Path) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let t = target.display();
    let kustomization = |text: String| vec![("kustomization.yaml", text)];
    vec![
        (
            "resources",
            kustomization(format!("resources:\n- {t}/cm.yaml\n")),
        ),
        (
            "configMapGenerator.files",
            kustomization(format!(
                "configMapGenerator:\n- name: gen\n  files:\n  - stolen={t}/secret.txt\n"
            )),
        ),
        (
            "configMapGenerator.envs",
            kustomization(format!(
                "configMapGenerator:\n- name: gen\n  envs:\n  - {t}/secret.env\n"
            )),
        ),
        // The case: a builtin generator config, a field the lexical check did not know.
        (
            "generators: builtin ConfigMapGenerator files",
            vec![
                ("kustomization.yaml", "generators: [gen.yaml]\n".into()),
                (
                    "gen.yaml",
                    format!(
                        "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {{name: gen}}\nfiles:\n- stolen={t}/secret.txt\n"
                    ),
                ),
            ],
        ),
        (
            "transformers: builtin PatchTransformer path",
            vec![
                (
                    "kustomization.yaml",
                    "resources: [own.yaml]\ntransformers: [patch.yaml]\n".into(),
                ),
                (
                    "own.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own\n".into(),
                ),
                (
                    "patch.yaml",
                    format!(
                        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {{name: p}}\npath: {t}/patch.yaml\ntarget: {{kind: ConfigMap}}\n"
                    ),
                ),
            ],
        ),
    ]
}

fn write_tree(dir: &Path, files: &[(&str, String)]) {
    for (rel, text) in files {
        write(dir, rel, text);
    }
}

fn outside(dir: &Path) {
    write(dir, "cm.yaml", &config_map("outside"));
    write(dir, "secret.txt", SENTINEL);
    write(dir, "secret.env", &format!("stolen={SENTINEL}\n"));
    write(
        dir,
        "patch.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own\ndata:\n  stolen: {SENTINEL}\n"
        ),
    );
}

#[tokio::test]
async fn sandboxed_build_reads_nothing_outside_the_root() {
    if !landlock() {
        return;
    }
    let Some(kubectl) = kubectl() else { return };
    let kubectl = kubectl.with_sandbox(SandboxMode::Required);
    let secret = tempfile::tempdir().unwrap();
    outside(secret.path());
    for (field, files) in trees(secret.path()) {
        let root = tempfile::tempdir().unwrap();
        write_tree(root.path(), &files);
        let result = kubectl.build_within(root.path(), root.path(), ".").await;
        let shown = match &result {
            Ok(out) => out.clone(),
            Err(e) => e.to_string(),
        };
        assert!(
            result.is_err(),
            "{field}: the build read outside the root: {shown}"
        );
        assert!(!shown.contains(SENTINEL), "{field}: {shown}");
        assert!(
            shown.contains("permission denied"),
            "{field}: not refused by the sandbox: {shown}"
        );
    }
}

#[tokio::test]
async fn sandboxed_build_reads_the_same_files_inside_the_root() {
    if !landlock() {
        return;
    }
    let Some(kubectl) = kubectl() else { return };
    let kubectl = kubectl.with_sandbox(SandboxMode::Required);
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("files");
    outside(&inside);
    // The build starts in a subdirectory and reaches a sibling, as an overlay does a base.
    for (field, files) in trees(&inside) {
        let app = root.path().join("app");
        let _ = std::fs::remove_dir_all(&app);
        write_tree(&app, &files);
        let out = kubectl
            .build_within(root.path(), &root.path().join("app"), "app")
            .await
            .unwrap_or_else(|e| panic!("{field}: {e}"));
        assert!(out.contains(SENTINEL), "{field}: {out}");
    }
}

/// The fallback (`--render-sandbox=off`, or `auto` on a kernel without Landlock) builds the
/// same tree unsandboxed: only the lexical check is left, which a direct build skips.
#[tokio::test]
async fn without_the_sandbox_the_same_build_reads_outside() {
    let Some(kubectl) = kubectl() else { return };
    let kubectl = kubectl.with_sandbox(SandboxMode::Off);
    let secret = tempfile::tempdir().unwrap();
    outside(secret.path());
    let (_, files) = &trees(secret.path())[3];
    let root = tempfile::tempdir().unwrap();
    write_tree(root.path(), files);
    let out = kubectl
        .build_within(root.path(), root.path(), ".")
        .await
        .unwrap();
    assert!(out.contains(SENTINEL), "{out}");
}

/// A renderer script in a directory of its own (outside every allowed system path).
fn script(dir: &Path, body: &str) -> KustomizeCommand {
    let path = dir.join("renderer.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    KustomizeCommand::parse(path.to_str().unwrap()).unwrap()
}

#[tokio::test]
async fn the_child_sees_none_of_the_services_environment() {
    let bin = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    for mode in [SandboxMode::Auto, SandboxMode::Off] {
        let out = script(bin.path(), "env")
            .with_sandbox(mode)
            .build_within(root.path(), root.path(), ".")
            .await
            .unwrap();
        let mut keys: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| *k != "PWD" && *k != "OLDPWD" && *k != "SHLVL" && *k != "_")
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "GIT_CONFIG_NOSYSTEM",
                "GIT_TERMINAL_PROMPT",
                "HOME",
                "KUBECONFIG",
                "PATH",
                "TMPDIR",
                "XDG_CACHE_HOME",
                "XDG_CONFIG_HOME",
                "XDG_DATA_HOME"
            ],
            "{mode}: {out}"
        );
        // cargo gives this test process CARGO_* variables: none reaches the child.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(!out.contains("CARGO_MANIFEST_DIR"), "{mode}: {out}");
    }
}

#[tokio::test]
async fn the_child_writes_only_its_scratch_directory() {
    if !landlock() {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let body = format!(
        "echo scratch > \"$TMPDIR/x\" && cat \"$TMPDIR/x\"\n\
         echo root > \"$1/written\" 2>/dev/null || echo root-refused\n\
         echo elsewhere > {}/written 2>/dev/null || echo elsewhere-refused\n\
         cat /proc/self/environ >/dev/null 2>&1 || echo proc-refused\n\
         ls {} >/dev/null 2>&1 || echo list-refused",
        elsewhere.path().display(),
        elsewhere.path().display()
    );
    let out = script(bin.path(), &body)
        .with_sandbox(SandboxMode::Required)
        .build_within(root.path(), root.path(), ".")
        .await
        .unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "scratch",
            "root-refused",
            "elsewhere-refused",
            "proc-refused",
            "list-refused"
        ],
        "{out}"
    );
    assert!(!root.path().join("written").exists());
    assert!(!elsewhere.path().join("written").exists());
}
