//! kustomize's YAML stream, read into objects and written back (`render -o yaml`).

use serde_json::Value;

use super::error::RenderError;

/// Parses kustomize's YAML stream into objects, with the shared parser's raised budget (a
/// render of thousands of objects is one stream). `*List` kinds are not flattened: kustomize
/// already did, and a custom kind named `...List` is an object of its own.
pub fn parse_stream(text: &str) -> Result<Vec<Value>, RenderError> {
    let docs: Vec<Value> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(text, crate::manifest::yaml_options())
    })
    .map_err(|e| RenderError::Output {
        message: e.to_string(),
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Writes objects as a YAML stream (`---` between documents).
pub fn to_yaml_stream<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
) -> Result<String, RenderError> {
    let mut out = String::new();
    for object in objects {
        let text = serde_saphyr::to_string(object).map_err(|e| RenderError::Output {
            message: format!(
                "serialising {}: {e}",
                crate::flux::substitute::object_id(object)
            ),
        })?;
        out.push_str("---\n");
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_stream_round_trips() {
        let objects = vec![
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "yes", "y": "1"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        ];
        let text = to_yaml_stream(&objects).unwrap();
        assert_eq!(parse_stream(&text).unwrap(), objects);
    }
}
