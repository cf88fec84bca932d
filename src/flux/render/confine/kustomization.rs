//! The references of a kustomization file, field by field as kustomize reads them.

use serde_json::Value;

use super::charts::Charts;
use super::fields::{
    fields, key_is, kv_sources, mapping, mappings, push_string, push_strings, string_list,
};
use super::reference::{Reference, Unchecked, Use};

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
