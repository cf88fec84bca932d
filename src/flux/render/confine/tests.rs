//! The lexical checks by table: paths, references field by field, plugins, what is fetched.

use std::path::{Path, PathBuf};

use super::*;

#[test]
fn join_within_by_table() {
    let root = Path::new("/r");
    let base = Path::new("/r/apps/prod");
    for (rel, expected) in [
        ("x.yaml", Some("/r/apps/prod/x.yaml")),
        ("./x.yaml", Some("/r/apps/prod/x.yaml")),
        ("../base", Some("/r/apps/base")),
        ("../../shared", Some("/r/shared")),
        ("../../../etc/passwd", None),
        ("/etc/passwd", None),
        ("a/../../..", Some("/r")),
        ("a/../../../..", None),
    ] {
        let got = join_within(root, base, rel, "test").ok();
        assert_eq!(got, expected.map(PathBuf::from), "{rel}");
    }
}

#[test]
fn component_paths_by_table() {
    for (path, local) in [
        ("../components/a", true),
        ("components/a", true),
        ("/abs", false),
        ("file:///abs", false),
        ("https://github.com/x/y", false),
        ("github.com/x/y", false),
        ("git@github.com:x/y", false),
    ] {
        assert_eq!(is_local_relative(path), local, "{path}");
    }
}

fn refs(k: serde_json::Value) -> Vec<(String, String, Use)> {
    references(&k)
        .unwrap()
        .into_iter()
        .map(|r| (r.field, r.reference, r.used))
        .collect()
}

fn r(field: &str, reference: &str, used: Use) -> (String, String, Use) {
    (field.to_string(), reference.to_string(), used)
}

#[test]
fn references_lists_every_path_field() {
    let k = serde_json::json!({
        "resources": ["a.yaml", "../base", "https://github.com/x/y//z"],
        "components": ["../c"],
        "crds": ["crd.yaml"],
        "configurations": ["conf.yaml"],
        "generators": ["gen.yaml", "apiVersion: builtin\nkind: X\n"],
        "transformers": ["t/"],
        "validators": ["v.yaml"],
        "patchesStrategicMerge": ["p.yaml", "apiVersion: v1\nkind: X\n"],
        "patches": [{"path": "q.yaml"}, {"patch": "- op: add"}],
        "patchesJson6902": [{"path": "j.yaml"}],
        "replacements": [{"path": "r.yaml"}],
        "configMapGenerator": [{"name": "c", "files": ["k=../f.txt", "g.txt"], "envs": ["e.env"]}],
        "secretGenerator": [{"name": "s", "env": "s.env"}],
        "openapi": {"path": "schema.json"},
        "helmGlobals": {"chartHome": "my-charts"},
        "helmCharts": [{"name": "db", "repo": "https://charts.example", "valuesFile": "v.yaml", "additionalValuesFiles": ["w.yaml"]}],
        "helmChartInflationGenerator": [{"chartName": "old", "chartHome": "old-charts", "values": "ov.yaml", "chartRepoUrl": "https://old.example"}]
    });
    assert_eq!(
        refs(k),
        [
            r("resources", "a.yaml", Use::Follow),
            r("resources", "../base", Use::Follow),
            r("resources", "https://github.com/x/y//z", Use::Follow),
            r("components", "../c", Use::Follow),
            r("crds", "crd.yaml", Use::Load),
            r("configurations", "conf.yaml", Use::Load),
            r("patchesStrategicMerge", "p.yaml", Use::Load),
            r(
                "patchesStrategicMerge",
                "apiVersion: v1\nkind: X\n",
                Use::Load
            ),
            r("generators[0]", "gen.yaml", Use::Plugins),
            r(
                "generators[1]",
                "apiVersion: builtin\nkind: X\n",
                Use::Plugins
            ),
            r("transformers[0]", "t/", Use::Plugins),
            r("validators[0]", "v.yaml", Use::Plugins),
            r("patches[].path", "q.yaml", Use::Load),
            r("patchesJson6902[].path", "j.yaml", Use::Load),
            r("replacements[].path", "r.yaml", Use::Load),
            r("openapi.path", "schema.json", Use::Load),
            r("configMapGenerator[].files", "../f.txt", Use::Load),
            r("configMapGenerator[].files", "g.txt", Use::Load),
            r("configMapGenerator[].envs", "e.env", Use::Load),
            r("secretGenerator[].env", "s.env", Use::Load),
            r("helmGlobals.chartHome", "my-charts", Use::Dir),
            r("helmCharts[].repo", "https://charts.example", Use::Repo),
            r("helmCharts[].valuesFile", "v.yaml", Use::Load),
            r("helmCharts[].additionalValuesFiles", "w.yaml", Use::Load),
            r(
                "helmChartInflationGenerator[].chartHome",
                "old-charts",
                Use::Dir
            ),
            r(
                "helmChartInflationGenerator[].chartRepoUrl",
                "https://old.example",
                Use::Repo
            ),
            r("helmChartInflationGenerator[].values", "ov.yaml", Use::Load),
            r(
                "helmCharts[].name (under chartHome \"charts\")",
                "charts/db",
                Use::Dir
            ),
            r(
                "helmCharts[].name (under chartHome \"my-charts\")",
                "my-charts/db",
                Use::Dir
            ),
            r(
                "helmCharts[].name (under chartHome \"old-charts\")",
                "old-charts/db",
                Use::Dir
            ),
            r(
                "helmChartInflationGenerator[].chartName (under chartHome \"charts\")",
                "charts/old",
                Use::Dir
            ),
            r(
                "helmChartInflationGenerator[].chartName (under chartHome \"my-charts\")",
                "my-charts/old",
                Use::Dir
            ),
            r(
                "helmChartInflationGenerator[].chartName (under chartHome \"old-charts\")",
                "old-charts/old",
                Use::Dir
            ),
        ]
    );
}

/// Go's encoding/json matches keys case-insensitively (with `ſ` for `s` and the Kelvin
/// sign for `k`): each spelling kustomize would decode is checked.
#[test]
fn references_match_keys_as_go_decodes_them() {
    let k = serde_json::json!({
        "Resources": ["/a"],
        "RESOURCES": ["/b"],
        "reſources": ["/c"],
        "configMapGenerator": [{"FILES": ["/d"]}],
        "\u{212A}ind": "ignored",
    });
    let got: Vec<String> = refs(k).into_iter().map(|(_, p, _)| p).collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, ["/a", "/b", "/c", "/d"]);
}

#[test]
fn a_path_field_of_another_shape_is_refused_by_table() {
    for (k, field, expected) in [
        (
            serde_json::json!({"resources": "a.yaml"}),
            "resources",
            "a list of strings, found a string",
        ),
        (
            serde_json::json!({"resources": [1]}),
            "resources",
            "a list of strings, found a number",
        ),
        (
            serde_json::json!({"patches": [{"path": {"x": 1}}]}),
            "patches[].path",
            "a string, found a mapping",
        ),
        (
            serde_json::json!({"patches": ["p.yaml"]}),
            "patches",
            "a list of mappings, found a string",
        ),
        (
            serde_json::json!({"configMapGenerator": [{"files": [["/x"]]}]}),
            "configMapGenerator[].files",
            "a list of strings, found a sequence",
        ),
        (
            serde_json::json!({"secretGenerator": [{"env": ["/x"]}]}),
            "secretGenerator[].env",
            "a string, found a sequence",
        ),
        (
            serde_json::json!({"openapi": "schema.json"}),
            "openapi",
            "a mapping, found a string",
        ),
        (
            serde_json::json!({"helmCharts": [{"name": 3}]}),
            "helmCharts[].name",
            "a string, found a number",
        ),
        (
            serde_json::json!({"generators": [{"kind": "X"}]}),
            "generators",
            "a list of strings, found a mapping",
        ),
    ] {
        let e = references(&k).unwrap_err();
        assert_eq!(e.field, field, "{k}");
        assert!(e.reason.contains(expected), "{k}: {}", e.reason);
    }
    let e = references(&serde_json::json!({"helmGlobals": {"configHome": "/tmp/h"}})).unwrap_err();
    assert_eq!(e.field, "helmGlobals.configHome");
    assert!(
        e.reason.contains("cannot be kept inside the artifact root"),
        "{}",
        e.reason
    );
}

#[test]
fn plugin_references_by_kind() {
    for (config, kind, expected) in [
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "ConfigMapGenerator", "metadata": {"name": "x"}, "files": ["k=a.txt", "b.txt"], "envs": ["c.env"], "env": "d.env"}),
            "ConfigMapGenerator",
            vec![
                r("files", "a.txt", Use::Load),
                r("files", "b.txt", Use::Load),
                r("envs", "c.env", Use::Load),
                r("env", "d.env", Use::Load),
            ],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "SecretGenerator", "files": ["s.txt"]}),
            "SecretGenerator",
            vec![r("files", "s.txt", Use::Load)],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "PatchTransformer", "path": "p.yaml", "patch": "x"}),
            "PatchTransformer",
            vec![r("path", "p.yaml", Use::Load)],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "PatchJson6902Transformer", "path": "j.yaml"}),
            "PatchJson6902Transformer",
            vec![r("path", "j.yaml", Use::Load)],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "PatchStrategicMergeTransformer", "paths": ["a.yaml", "b.yaml"]}),
            "PatchStrategicMergeTransformer",
            vec![
                r("paths", "a.yaml", Use::Load),
                r("paths", "b.yaml", Use::Load),
            ],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "ReplacementTransformer", "replacements": [{"path": "r.yaml"}, {"source": {}}]}),
            "ReplacementTransformer",
            vec![r("replacements[].path", "r.yaml", Use::Load)],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "ValueAddTransformer", "targetFilePath": "t.yaml"}),
            "ValueAddTransformer",
            vec![r("targetFilePath", "t.yaml", Use::Load)],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "HelmChartInflationGenerator", "name": "db", "chartHome": "ch", "repo": "oci://r", "valuesFile": "v.yaml", "additionalValuesFiles": ["w.yaml"]}),
            "HelmChartInflationGenerator",
            vec![
                r("chartHome", "ch", Use::Dir),
                r("repo", "oci://r", Use::Repo),
                r("valuesFile", "v.yaml", Use::Load),
                r("additionalValuesFiles", "w.yaml", Use::Load),
                r("name (under chartHome \"charts\")", "charts/db", Use::Dir),
                r("name (under chartHome \"ch\")", "ch/db", Use::Dir),
            ],
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "LabelTransformer", "labels": {"a": "b"}}),
            "LabelTransformer",
            vec![],
        ),
    ] {
        let (k, got) = plugin_references(&config).unwrap();
        assert_eq!(k, kind);
        assert_eq!(
            got.into_iter()
                .map(|r| (r.field, r.reference, r.used))
                .collect::<Vec<_>>(),
            expected,
            "{kind}"
        );
    }
}

#[test]
fn only_builtin_plugins_are_accepted_by_table() {
    for (config, needle) in [
        (
            serde_json::json!({"apiVersion": "example.com/v1", "kind": "ConfigMapGenerator"}),
            "is not a kustomize builtin plugin",
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "Exec"}),
            "is not a kustomize builtin plugin",
        ),
        (
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": []}),
            "is not a kustomize builtin plugin",
        ),
        (
            serde_json::json!({"kind": "ConfigMapGenerator"}),
            "is not a kustomize builtin plugin",
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "LabelTransformer", "metadata": {"annotations": {"config.kubernetes.io/function": "exec: {path: /bin/sh}"}}}),
            "KRM function annotation config.kubernetes.io/function",
        ),
        (
            serde_json::json!({"apiVersion": "builtin", "kind": "LabelTransformer", "metadata": {"annotations": {"config.k8s.io/function": "container: {image: x}"}}}),
            "KRM function annotation config.k8s.io/function",
        ),
        (serde_json::json!("a string"), "expected a plugin config"),
    ] {
        let e = plugin_references(&config).unwrap_err();
        assert!(e.reason.contains(needle), "{config}: {}", e.reason);
    }
}

#[test]
fn a_plugin_directory_may_only_list_resources() {
    assert_eq!(
        plain_resources(&serde_json::json!({"resources": ["a.yaml", "b/"], "namePrefix": "p-"}))
            .unwrap(),
        ["a.yaml", "b/"]
    );
    for field in [
        "patches",
        "replacements",
        "generators",
        "components",
        "configMapGenerator",
        "commonAnnotations",
        "Patches",
    ] {
        let e =
            plain_resources(&serde_json::json!({"resources": ["a.yaml"], field: []})).unwrap_err();
        assert_eq!(e.field, field);
    }
}

#[test]
fn fetched_references_by_table() {
    for (reference, fetched) in [
        ("https://example.com/x.yaml", true),
        ("HTTP://example.com/x.yaml", true),
        ("github.com/org/repo//dir?ref=v1", true),
        ("GitHub.com:org/repo", true),
        ("git::https://gitlab.com/org/repo", true),
        ("ssh://git@gitlab.com/org/repo", true),
        ("file:///srv/repo", true),
        ("deploy@gitlab.example.com:org/repo.git", true),
        ("git@github.com:org/repo", true),
        ("gh:org/repo", true),
        ("base", false),
        ("../base/kustomization.yaml", false),
        ("gitlab.com/org/repo", false),
        ("a.b@c", false),
        ("1user@host:x", false),
    ] {
        assert_eq!(is_fetched(reference), fetched, "{reference}");
    }
    assert_eq!(file_url_path("git::FILE:///srv/repo"), Some("/srv/repo"));
    assert_eq!(file_url_path("file://x"), Some("x"));
    assert_eq!(file_url_path("files/x"), None);
}
