//! The references of a plugin config, and the refusal of any config that is not a kustomize
//! builtin plugin (exec and container KRM functions are never run).

use serde_json::Value;

use super::charts::Charts;
use super::fields::{fields, kv_sources, mappings, push_string, push_strings};
use super::reference::{Reference, Unchecked, Use};

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
