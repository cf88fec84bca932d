//! Keeping the build inside the artifact root.
//!
//! kustomize-controller builds on a filesystem that refuses any path outside the artifact
//! root. An external kustomize with load restrictions off has no such guard, so before the
//! build every path the tree can make kustomize read (`spec.path`, `spec.components`, and the
//! file references of every kustomization file below the root) is checked lexically. That is
//! sound because the unpacked tree holds no symlinks (the untar skips them, and `--path` is
//! copied the same way), so a path's lexical form is where it leads.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::RenderError;

/// Resolves `relative` against `base` (a directory inside `root`) without touching the disk,
/// refusing absolute paths and any `..` that climbs above `root`. `what` names the reference.
pub fn join_within(
    root: &Path,
    base: &Path,
    relative: &str,
    what: &str,
) -> Result<PathBuf, RenderError> {
    let escape = || RenderError::Escapes {
        what: what.to_string(),
        path: relative.to_string(),
    };
    let rel = Path::new(relative);
    if rel.is_absolute() {
        return Err(escape());
    }
    let base_rel = base.strip_prefix(root).map_err(|_| escape())?;
    let mut parts: Vec<std::ffi::OsString> = Vec::new();
    for c in base_rel.components().chain(rel.components()) {
        match c {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape());
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(parts);
    Ok(out)
}

/// Whether a kustomize reference is remote (kustomize fetches it; not a path in the tree).
/// The prefixes are kustomize's own list, as Flux's `IsLocalRelativePath` uses it.
pub fn is_remote(reference: &str) -> bool {
    const REMOTE: [&str; 8] = [
        "git::",
        "gh:",
        "ssh://",
        "https://",
        "http://",
        "git@",
        "github.com:",
        "github.com/",
    ];
    let lower = reference.to_ascii_lowercase();
    REMOTE
        .iter()
        .any(|p| p.len() < lower.len() && lower.starts_with(p))
}

/// Flux's rule for `spec.components`: local and relative (`file://` stripped before the check).
pub fn is_local_relative(path: &str) -> bool {
    if is_remote(path) {
        return false;
    }
    let lower = path.to_ascii_lowercase();
    let stripped = lower.strip_prefix("file://").unwrap_or(&lower);
    !Path::new(path).is_absolute() && !Path::new(stripped).is_absolute()
}

// ---- What kustomize reads, field by field ----
//
// Every field below names something kustomize reads while it builds; the table says where in
// kustomize's sources (sigs.k8s.io/kustomize/api, read at 12f9e63) the read happens, so the list
// can be checked against a newer kustomize.
//
// | field                                        | read by                                                    |
// |----------------------------------------------|------------------------------------------------------------|
// | resources, bases                             | internal/target/kusttarget.go accumulateResources (file: rFactory.FromFile -> ldr.Load; dir or git/http: ldr.New) |
// | components                                   | kusttarget.go accumulateComponents (ldr.New)               |
// | crds                                         | internal/accumulator/loadconfigfromcrds.go (ldr.Load)      |
// | configurations                               | internal/plugins/builtinconfig/loaddefaultconfig.go (ldr.Load) |
// | generators, transformers, validators         | kusttarget.go configureExternalGenerators/-Transformers: inline YAML, else accumulateResources (file or kustomization dir) |
// | openapi.path                                 | kusttarget.go accumulateDirectory (ldr.Load)               |
// | patchesStrategicMerge[]                      | builtins/PatchStrategicMergeTransformer.go loadFromPaths: inline YAML, else ldr.Load |
// | patches[].path, patchesJson6902[].path       | builtins/PatchTransformer.go, PatchJson6902Transformer.go (ldr.Load) |
// | replacements[].path                          | builtins/ReplacementTransformer.go (ldr.Load)              |
// | configMapGenerator/secretGenerator[].files, .envs, .env | api/kv/kv.go keyValuesFromFileSources/-EnvFiles (ldr.Load; `key=path`: internal/generators/utils.go ParseFileSource) |
// | helmGlobals.chartHome, helmCharts[].name     | builtins/HelmChartInflationGenerator.go absChartHome (filepath.Join(root, chartHome), then the chart's name) |
// | helmCharts[].valuesFile, .additionalValuesFiles | HelmChartInflationGenerator.go validateArgs/Generate (ldr.Load; helm `-f`) |
// | helmCharts[].repo                            | HelmChartInflationGenerator.go pullCommand (`helm pull --repo`): remote |
// | helmGlobals.configHome                       | HelmChartInflationGenerator.go runHelmCommand (HELM_CONFIG_HOME, not resolved against the root) |
// | helmChartInflationGenerator[].chartHome, .chartName, .values, .helmHome, .chartRepoUrl | types/helmchartargs.go SplitHelmParameters (the legacy spelling of the above) |
//
// Builtin plugin configs (apiVersion `builtin`, internal/plugins/loader/loader.go isBuiltinPlugin),
// by kind (internal/plugins/builtinhelpers/builtins.go):
//
// | kind                                   | fields read                                             |
// |----------------------------------------|---------------------------------------------------------|
// | ConfigMapGenerator, SecretGenerator    | files, envs, env (types/kvpairsources.go, via api/kv/kv.go) |
// | PatchTransformer                       | path (builtins/PatchTransformer.go Config)              |
// | PatchJson6902Transformer               | path (builtins/PatchJson6902Transformer.go Config)      |
// | PatchStrategicMergeTransformer         | paths (builtins/PatchStrategicMergeTransformer.go loadFromPaths) |
// | ReplacementTransformer                 | replacements[].path (builtins/ReplacementTransformer.go Config) |
// | ValueAddTransformer                    | targetFilePath (builtins/ValueAddTransformer.go Config) |
// | HelmChartInflationGenerator            | chartHome, name, valuesFile, additionalValuesFiles, configHome, repo (as helmCharts above) |
// | AnnotationsTransformer, HashTransformer, IAMPolicyGenerator, ImageTagTransformer, LabelTransformer, NamespaceTransformer, PrefixSuffixTransformer, PrefixTransformer, SuffixTransformer, ReplicaCountTransformer | none (field specs and values only) |

/// How kustomize uses a reference found in a kustomization file or a plugin config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A file kustomize loads (`ifc.Loader.Load`): a path from the kustomization's directory,
    /// or an http(s) URL it downloads.
    Load,
    /// `resources`, `bases`, `components`: a file, a kustomization directory (followed), or a
    /// remote base kustomize clones or downloads.
    Follow,
    /// A `generators`, `transformers` or `validators` entry: inline configs, a file of configs,
    /// or a kustomization directory whose resources are the configs.
    Plugins,
    /// A directory helm reads below (`chartHome`, a chart under it).
    Dir,
    /// Where helm pulls a chart from: never a path, always remote.
    Repo,
}

/// One reference: the field it is in (as the refusal names it), the text, how it is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub field: String,
    pub reference: String,
    pub used: Use,
}

/// Why a kustomization file or a plugin config cannot be checked: the field (empty for the
/// whole config) and what is wrong with it. It never quotes a file the config points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchecked {
    pub field: String,
    pub reason: String,
}

impl Unchecked {
    fn shape(field: &str, expected: &str, found: &Value) -> Self {
        Self {
            field: field.to_string(),
            reason: format!(
                "expected {expected}, found {}: a field kustomize reads a path from must have its shape",
                super::generator::json_type(found)
            ),
        }
    }
}

/// kustomize's builtin plugin kinds: the keys of `GeneratorFactories` and `TransformerFactories`
/// in api/internal/plugins/builtinhelpers/builtins.go. Anything else is an exec or container
/// plugin (a KRM function), which the build must never run.
pub const BUILTIN_PLUGIN_KINDS: [&str; 18] = [
    "AnnotationsTransformer",
    "ConfigMapGenerator",
    "HashTransformer",
    "HelmChartInflationGenerator",
    "IAMPolicyGenerator",
    "ImageTagTransformer",
    "LabelTransformer",
    "NamespaceTransformer",
    "PatchJson6902Transformer",
    "PatchStrategicMergeTransformer",
    "PatchTransformer",
    "PrefixSuffixTransformer",
    "PrefixTransformer",
    "ReplacementTransformer",
    "ReplicaCountTransformer",
    "SecretGenerator",
    "SuffixTransformer",
    "ValueAddTransformer",
];

/// The apiVersion of a builtin plugin config (`konfig.BuiltinPluginApiVersion`).
pub const BUILTIN_PLUGIN_API_VERSION: &str = "builtin";

/// The annotations that make a config a KRM function (kyaml's `runtimeutil`).
const FUNCTION_ANNOTATIONS: [&str; 2] = ["config.kubernetes.io/function", "config.k8s.io/function"];

/// kustomize's default chart home, relative to the kustomization (`types.HelmDefaultHome`).
const HELM_DEFAULT_HOME: &str = "charts";

/// Why `configHome` is refused: kustomize hands it to helm as HELM_CONFIG_HOME unresolved, so a
/// relative one is relative to the service's working directory, not the tree.
const CONFIG_HOME_REFUSED: &str = "helm's config home is passed to helm as it is, relative to the build's working directory and not to the artifact: it cannot be kept inside the artifact root (remove it; a temporary one is used)";

/// One Unicode simple case fold step of Go's `bytes.EqualFold`, as far as it reaches ASCII
/// letters: `ſ` folds to `s` and the Kelvin sign to `k`.
fn folded(c: char) -> char {
    match c {
        'ſ' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    }
}

/// Whether Go's encoding/json would decode `key` into the field `name`. kustomize decodes
/// kustomization files and builtin plugin configs with it, and it matches keys to fields
/// case-insensitively: `Files:` is `files:`.
fn key_is(key: &str, name: &str) -> bool {
    key.chars()
        .map(folded)
        .eq(name.chars().map(|c| c.to_ascii_lowercase()))
}

/// Every value whose key decodes into `name` (a later duplicate wins in Go; all are checked).
fn fields<'a>(object: &'a Map<String, Value>, name: &'a str) -> impl Iterator<Item = &'a Value> {
    object
        .iter()
        .filter(move |(k, _)| key_is(k, name))
        .map(|(_, v)| v)
}

fn push_string(
    out: &mut Vec<Reference>,
    field: &str,
    value: &Value,
    used: Use,
) -> Result<(), Unchecked> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) => {
            if !s.is_empty() {
                out.push(Reference {
                    field: field.to_string(),
                    reference: s.clone(),
                    used,
                });
            }
            Ok(())
        }
        other => Err(Unchecked::shape(field, "a string", other)),
    }
}

/// A list field whose items must each have one shape (`item` says whether one has it and
/// gives it); null items are skipped as kustomize's decoder does, and anything else is refused
/// naming `what` the field holds.
fn list_of<'a, T>(
    field: &str,
    value: &'a Value,
    what: &str,
    item: impl Fn(&'a Value) -> Option<T>,
) -> Result<Vec<T>, Unchecked> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| item(v).ok_or_else(|| Unchecked::shape(field, what, v)))
            .collect(),
        other => Err(Unchecked::shape(field, what, other)),
    }
}

fn string_list<'a>(field: &str, value: &'a Value) -> Result<Vec<&'a str>, Unchecked> {
    list_of(field, value, "a list of strings", Value::as_str)
}

fn push_strings(
    out: &mut Vec<Reference>,
    field: &str,
    value: &Value,
    used: Use,
) -> Result<(), Unchecked> {
    for s in string_list(field, value)? {
        out.push(Reference {
            field: field.to_string(),
            reference: s.to_string(),
            used,
        });
    }
    Ok(())
}

fn mapping<'a>(field: &str, value: &'a Value) -> Result<Option<&'a Map<String, Value>>, Unchecked> {
    match value {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        other => Err(Unchecked::shape(field, "a mapping", other)),
    }
}

fn mappings<'a>(field: &str, value: &'a Value) -> Result<Vec<&'a Map<String, Value>>, Unchecked> {
    list_of(field, value, "a list of mappings", Value::as_object)
}

/// `files`, `envs`, `env` of a ConfigMap or Secret generator (`types.KvPairSources`).
fn kv_sources(
    out: &mut Vec<Reference>,
    prefix: &str,
    item: &Map<String, Value>,
) -> Result<(), Unchecked> {
    for v in fields(item, "files") {
        let field = format!("{prefix}files");
        for f in string_list(&field, v)? {
            // `key=path` or `path` (ParseFileSource; more than one `=` fails in kustomize,
            // and is checked whole here).
            let path = match f.split_once('=') {
                Some((_, p)) if !p.contains('=') => p,
                _ => f,
            };
            out.push(Reference {
                field: field.clone(),
                reference: path.to_string(),
                used: Use::Load,
            });
        }
    }
    for v in fields(item, "envs") {
        push_strings(out, &format!("{prefix}envs"), v, Use::Load)?;
    }
    for v in fields(item, "env") {
        push_string(out, &format!("{prefix}env"), v, Use::Load)?;
    }
    Ok(())
}

fn config_home(field: &str, value: &Value) -> Result<(), Unchecked> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) if s.is_empty() => Ok(()),
        Value::String(_) => Err(Unchecked {
            field: field.to_string(),
            reason: CONFIG_HOME_REFUSED.into(),
        }),
        other => Err(Unchecked::shape(field, "a string", other)),
    }
}

/// The charts a kustomization or a HelmChartInflationGenerator config inflates: where helm
/// reads them (`chartHome`, joined with each chart's `name`), their values files, their repos.
#[derive(Default)]
struct Charts {
    homes: Vec<String>,
    names: Vec<(String, String)>,
}

impl Charts {
    fn chart(
        &mut self,
        out: &mut Vec<Reference>,
        prefix: &str,
        chart: &Map<String, Value>,
        legacy: bool,
    ) -> Result<(), Unchecked> {
        let (name, repo, values) = if legacy {
            ("chartName", "chartRepoUrl", "values")
        } else {
            ("name", "repo", "valuesFile")
        };
        for v in fields(chart, name) {
            let field = format!("{prefix}{name}");
            if let Some(n) = v.as_str() {
                self.names.push((field, n.to_string()));
            } else if !v.is_null() {
                return Err(Unchecked::shape(&field, "a string", v));
            }
        }
        for v in fields(chart, repo) {
            push_string(out, &format!("{prefix}{repo}"), v, Use::Repo)?;
        }
        for v in fields(chart, values) {
            push_string(out, &format!("{prefix}{values}"), v, Use::Load)?;
        }
        if !legacy {
            for v in fields(chart, "additionalValuesFiles") {
                push_strings(out, &format!("{prefix}additionalValuesFiles"), v, Use::Load)?;
            }
        }
        Ok(())
    }

    fn globals(
        &mut self,
        out: &mut Vec<Reference>,
        prefix: &str,
        globals: &Map<String, Value>,
        config_home_key: &str,
    ) -> Result<(), Unchecked> {
        for v in fields(globals, "chartHome") {
            let field = format!("{prefix}chartHome");
            push_string(out, &field, v, Use::Dir)?;
            if let Some(h) = v.as_str().filter(|h| !h.is_empty()) {
                self.homes.push(h.to_string());
            }
        }
        for v in fields(globals, config_home_key) {
            config_home(&format!("{prefix}{config_home_key}"), v)?;
        }
        Ok(())
    }

    /// Each chart's directory under each chart home it may be read from (`filepath.Join` of
    /// the two, as `absChartHome` and `AsHelmArgs` do).
    fn finish(self, out: &mut Vec<Reference>) {
        let mut homes = self.homes;
        homes.insert(0, HELM_DEFAULT_HOME.to_string());
        for (field, name) in &self.names {
            for home in &homes {
                out.push(Reference {
                    field: format!("{field} (under chartHome {home:?})"),
                    reference: format!("{home}/{name}"),
                    used: Use::Dir,
                });
            }
        }
    }
}

/// The file references of one kustomization file (parsed), as kustomize reads them (see the
/// table above), remote ones included: the caller decides what a remote reference may be.
/// A field whose shape is not what kustomize decodes is refused rather than skipped.
pub fn references(kustomization: &Value) -> Result<Vec<Reference>, Unchecked> {
    let Some(k) = mapping("the kustomization", kustomization)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, used) in [
        ("resources", Use::Follow),
        ("bases", Use::Follow),
        ("components", Use::Follow),
        ("crds", Use::Load),
        ("configurations", Use::Load),
        // Inline patch or path: kustomize reads it as a file when it is not a patch, so
        // every entry is checked as a path (an inline patch never leaves the root).
        ("patchesStrategicMerge", Use::Load),
    ] {
        for v in fields(k, name) {
            push_strings(&mut out, name, v, used)?;
        }
    }
    for name in ["generators", "transformers", "validators"] {
        for v in fields(k, name) {
            for (i, entry) in string_list(name, v)?.into_iter().enumerate() {
                out.push(Reference {
                    field: format!("{name}[{i}]"),
                    reference: entry.to_string(),
                    used: Use::Plugins,
                });
            }
        }
    }
    for name in ["patches", "patchesJson6902", "replacements"] {
        for v in fields(k, name) {
            for item in mappings(name, v)? {
                for p in fields(item, "path") {
                    push_string(&mut out, &format!("{name}[].path"), p, Use::Load)?;
                }
            }
        }
    }
    for v in fields(k, "openapi") {
        if let Some(o) = mapping("openapi", v)? {
            for p in fields(o, "path") {
                push_string(&mut out, "openapi.path", p, Use::Load)?;
            }
        }
    }
    for name in ["configMapGenerator", "secretGenerator"] {
        for v in fields(k, name) {
            for item in mappings(name, v)? {
                kv_sources(&mut out, &format!("{name}[]."), item)?;
            }
        }
    }
    let mut charts = Charts::default();
    for v in fields(k, "helmGlobals") {
        if let Some(g) = mapping("helmGlobals", v)? {
            charts.globals(&mut out, "helmGlobals.", g, "configHome")?;
        }
    }
    for v in fields(k, "helmCharts") {
        for chart in mappings("helmCharts", v)? {
            charts.chart(&mut out, "helmCharts[].", chart, false)?;
        }
    }
    for v in fields(k, "helmChartInflationGenerator") {
        for chart in mappings("helmChartInflationGenerator", v)? {
            let prefix = "helmChartInflationGenerator[].";
            charts.globals(&mut out, prefix, chart, "helmHome")?;
            charts.chart(&mut out, prefix, chart, true)?;
        }
    }
    charts.finish(&mut out);
    Ok(out)
}

/// The references of one plugin config listed under `generators`, `transformers` or
/// `validators`, with its kind for the messages; a config that is not a builtin plugin (an
/// exec or container KRM function, or any kind kustomize does not build in) is refused.
pub fn plugin_references(config: &Value) -> Result<(String, Vec<Reference>), Unchecked> {
    let Some(c) = config.as_object() else {
        return Err(Unchecked::shape("", "a plugin config (a mapping)", config));
    };
    // kyaml reads the type exactly (not through Go's json), as kustomize's plugin loader does.
    let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if api_version != BUILTIN_PLUGIN_API_VERSION || !BUILTIN_PLUGIN_KINDS.contains(&kind) {
        return Err(Unchecked {
            field: String::new(),
            reason: format!(
                "kind {kind:?} apiVersion {api_version:?} is not a kustomize builtin plugin: exec and container plugins (KRM functions) are never run; only apiVersion {BUILTIN_PLUGIN_API_VERSION:?} with a builtin kind is built"
            ),
        });
    }
    if let Some(annotations) = c
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        && let Some(a) = FUNCTION_ANNOTATIONS
            .iter()
            .find(|a| annotations.contains_key(**a))
    {
        return Err(Unchecked {
            field: String::new(),
            reason: format!(
                "{kind} carries the KRM function annotation {a}: exec and container plugins are never run"
            ),
        });
    }
    let mut out = Vec::new();
    match kind {
        "ConfigMapGenerator" | "SecretGenerator" => kv_sources(&mut out, "", c)?,
        "PatchTransformer" | "PatchJson6902Transformer" => {
            for v in fields(c, "path") {
                push_string(&mut out, "path", v, Use::Load)?;
            }
        }
        "PatchStrategicMergeTransformer" => {
            for v in fields(c, "paths") {
                push_strings(&mut out, "paths", v, Use::Load)?;
            }
        }
        "ReplacementTransformer" => {
            for v in fields(c, "replacements") {
                for item in mappings("replacements", v)? {
                    for p in fields(item, "path") {
                        push_string(&mut out, "replacements[].path", p, Use::Load)?;
                    }
                }
            }
        }
        "ValueAddTransformer" => {
            for v in fields(c, "targetFilePath") {
                push_string(&mut out, "targetFilePath", v, Use::Load)?;
            }
        }
        "HelmChartInflationGenerator" => {
            let mut charts = Charts::default();
            charts.globals(&mut out, "", c, "configHome")?;
            charts.chart(&mut out, "", c, false)?;
            charts.finish(&mut out);
        }
        _ => {}
    }
    Ok((kind.to_string(), out))
}

/// The fields a kustomization directory listed under `generators`, `transformers` or
/// `validators` may have: none of them can change a config's path fields or make it a
/// function, so the configs read from its resources are the configs kustomize will run.
const PLAIN_FIELDS: [&str; 9] = [
    "apiVersion",
    "kind",
    "metadata",
    "resources",
    "bases",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "buildMetadata",
];

/// The resources of a kustomization directory of plugin configs, refused when it has a field
/// that could rewrite the configs after they are checked (patches, replacements, generators,
/// components, ...): those are only known after a build.
pub fn plain_resources(kustomization: &Value) -> Result<Vec<String>, Unchecked> {
    let Some(k) = mapping("the kustomization", kustomization)? else {
        return Ok(Vec::new());
    };
    if let Some(key) = k
        .keys()
        .find(|key| !PLAIN_FIELDS.iter().any(|f| key_is(key, f)))
    {
        return Err(Unchecked {
            field: key.clone(),
            reason: "a kustomization whose output configures plugins may only list resources (and set namespace, namePrefix or nameSuffix): its other fields rewrite the configs after they can be checked".into(),
        });
    }
    let mut out = Vec::new();
    for name in ["resources", "bases"] {
        for v in fields(k, name) {
            out.extend(string_list(name, v)?.into_iter().map(str::to_string));
        }
    }
    Ok(out)
}

/// Whether kustomize downloads `reference` over http(s) when it loads it as a file
/// (`loader.IsRemoteFile`: the URL's scheme, which Go lower-cases).
pub fn is_http(reference: &str) -> bool {
    let lower = reference.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Whether kustomize fetches `reference` instead of reading the tree: Flux's list
/// ([`is_remote`]), an http(s) URL, or anything `git.NewRepoSpecFromURL` takes for a git
/// repository to clone (api/internal/git/repospec.go: after an optional `git::`, an ssh, https,
/// http or file URL, a `user@host:path` address, a github.com path).
pub fn is_fetched(reference: &str) -> bool {
    if is_remote(reference) || is_http(reference) {
        return true;
    }
    let lower = reference.to_ascii_lowercase();
    let rest = lower.strip_prefix("git::").unwrap_or(&lower);
    if ["ssh://", "https://", "http://", "file://"]
        .iter()
        .any(|s| rest.starts_with(s))
    {
        return true;
    }
    // extractUsername: ^[a-zA-Z][a-zA-Z0-9-]*@
    let mut chars = rest.chars();
    if chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        for c in chars {
            if c == '@' {
                return true;
            }
            if !(c.is_ascii_alphanumeric() || c == '-') {
                break;
            }
        }
    }
    rest.starts_with("github.com/") || rest.starts_with("github.com:")
}

/// The path of a `file://` git URL (after an optional `git::`): kustomize clones the local
/// repository there, which is a read of that path.
pub fn file_url_path(reference: &str) -> Option<&str> {
    let lower = reference.to_ascii_lowercase();
    let skip = if lower.starts_with("git::") { 5 } else { 0 };
    lower[skip..]
        .starts_with("file://")
        .then(|| &reference[skip + "file://".len()..])
}

#[cfg(test)]
mod tests {
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
        let e =
            references(&serde_json::json!({"helmGlobals": {"configHome": "/tmp/h"}})).unwrap_err();
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
            plain_resources(
                &serde_json::json!({"resources": ["a.yaml", "b/"], "namePrefix": "p-"})
            )
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
            let e = plain_resources(&serde_json::json!({"resources": ["a.yaml"], field: []}))
                .unwrap_err();
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
}
