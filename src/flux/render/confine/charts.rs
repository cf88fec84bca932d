//! The helm charts a kustomization inflates: their chart homes, chart directories, values
//! files and repositories.

use serde_json::{Map, Value};

use super::fields::{config_home, fields, push_string, push_strings};
use super::reference::{Reference, Unchecked, Use};

/// kustomize's default chart home, relative to the kustomization (`types.HelmDefaultHome`).
const HELM_DEFAULT_HOME: &str = "charts";

/// The charts a kustomization or a HelmChartInflationGenerator config inflates: where helm
/// reads them (`chartHome`, joined with each chart's `name`), their values files, their repos.
#[derive(Default)]
pub(super) struct Charts {
    homes: Vec<String>,
    names: Vec<(String, String)>,
}

impl Charts {
    pub(super) fn chart(
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

    pub(super) fn globals(
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
    pub(super) fn finish(self, out: &mut Vec<Reference>) {
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
