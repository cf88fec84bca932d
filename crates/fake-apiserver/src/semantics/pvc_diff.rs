//! The go-cmp diff the real server embeds in the "spec is immutable" message of a claim
//! (`error-pvc-unbound-immutable.json`): struct fields in Go order, two equal fields of context
//! around a change, longer equal runs elided as `... // N identical fields`, keys aligned in runs
//! of one-line records. go-cmp picks spaces or no-break spaces at random per process; the
//! fixtures show spaces for 1.28 and no-break spaces for 1.32, so the fake follows the version.
//! Values other than strings, string lists and resource lists are rendered approximately.

use serde_json::Value;

use super::super::version::KubeVersion;
use super::quantity::Quantity;

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    Same,
    Old,
    New,
}

struct Line {
    mark: Mark,
    depth: usize,
    key: Option<String>,
    value: String,
    /// Part of a multi-line record: never aligned.
    multi: bool,
}

#[derive(Clone, Copy)]
enum Shape {
    Strings,
    Str,
    PtrStr,
    ResourceList,
    Opaque,
    Resources,
}

fn fields(version: KubeVersion) -> Vec<(&'static str, &'static str, Shape)> {
    let mut f = vec![
        ("AccessModes", "accessModes", Shape::Strings),
        ("Selector", "selector", Shape::Opaque),
        ("Resources", "resources", Shape::Resources),
        ("VolumeName", "volumeName", Shape::Str),
        ("StorageClassName", "storageClassName", Shape::PtrStr),
        ("VolumeMode", "volumeMode", Shape::PtrStr),
        ("DataSource", "dataSource", Shape::Opaque),
        ("DataSourceRef", "dataSourceRef", Shape::Opaque),
    ];
    if version >= KubeVersion::V1_32 {
        f.push((
            "VolumeAttributesClassName",
            "volumeAttributesClassName",
            Shape::PtrStr,
        ));
    }
    f
}

fn resource_fields(version: KubeVersion) -> Vec<(&'static str, &'static str, Shape)> {
    let mut f = vec![
        ("Limits", "limits", Shape::ResourceList),
        ("Requests", "requests", Shape::ResourceList),
    ];
    if version == KubeVersion::V1_28 {
        f.push(("Claims", "claims", Shape::Opaque));
    }
    f
}

fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

fn quantity_repr(s: &str) -> String {
    Quantity::parse(s)
        .map(|q| q.go_repr(s))
        .unwrap_or_else(|| format!("{s:?}"))
}

fn resource_entries(v: &Value) -> Vec<String> {
    let mut entries: Vec<(String, String)> = v
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, q)| (k.clone(), quantity_repr(q.as_str().unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default();
    entries.sort();
    entries
        .into_iter()
        .map(|(k, q)| format!("s{k:?}: {q}"))
        .collect()
}

/// One-line rendering of a field value, types elided as go-cmp does inside a struct.
fn inline(shape: Shape, v: Option<&Value>, version: KubeVersion) -> String {
    if is_zero(v) {
        return match shape {
            Shape::Str => "\"\"".into(),
            Shape::Resources => "{}".into(),
            _ => "nil".into(),
        };
    }
    let v = v.unwrap_or(&Value::Null);
    match shape {
        Shape::Strings => {
            let items: Vec<String> = v
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| format!("{:?}", s.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        Shape::Str => format!("{:?}", v.as_str().unwrap_or_default()),
        Shape::PtrStr => format!("&{:?}", v.as_str().unwrap_or_default()),
        Shape::ResourceList => format!("{{{}}}", resource_entries(v).join(", ")),
        Shape::Opaque => format!("&{v}"),
        Shape::Resources => {
            let parts: Vec<String> = resource_fields(version)
                .into_iter()
                .filter(|(_, json, _)| !is_zero(v.get(*json)))
                .map(|(go, json, shape)| format!("{go}: {}", inline(shape, v.get(json), version)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

fn push_replaced(
    lines: &mut Vec<Line>,
    mark: Mark,
    depth: usize,
    key: &str,
    shape: Shape,
    v: Option<&Value>,
    version: KubeVersion,
) {
    if let (Shape::ResourceList, Some(val)) = (shape, v.filter(|v| !is_zero(Some(v)))) {
        lines.push(Line {
            mark,
            depth,
            key: Some(key.into()),
            value: "core.ResourceList{".into(),
            multi: true,
        });
        for e in resource_entries(val) {
            lines.push(Line {
                mark,
                depth: depth + 1,
                key: None,
                value: format!("{e},"),
                multi: true,
            });
        }
        lines.push(Line {
            mark,
            depth,
            key: None,
            value: "},".into(),
            multi: true,
        });
    } else {
        lines.push(Line {
            mark,
            depth,
            key: Some(key.into()),
            value: format!("{},", inline(shape, v, version)),
            multi: false,
        });
    }
}

fn struct_diff(
    lines: &mut Vec<Line>,
    fields: &[(&'static str, &'static str, Shape)],
    old: &Value,
    new: &Value,
    depth: usize,
    version: KubeVersion,
) {
    let equal: Vec<bool> = fields
        .iter()
        .map(|(_, json, _)| {
            let (a, b) = (old.get(*json), new.get(*json));
            (is_zero(a) && is_zero(b)) || a == b
        })
        .collect();
    // Runs of equal fields, with their position among the runs.
    let mut i = 0;
    let n = fields.len();
    while i < n {
        if equal[i] {
            let start = i;
            while i < n && equal[i] {
                i += 1;
            }
            let count = i - start;
            let first = start == 0;
            let last = i == n;
            let mut lo = if first { 0 } else { count.min(2) };
            let mut hi = if last { 0 } else { (count - lo).min(2) };
            if count > lo + hi && count - (lo + hi) == 1 {
                if last {
                    lo += 1;
                } else {
                    hi += 1;
                }
            }
            for (go, json, shape) in &fields[start..start + lo] {
                lines.push(Line {
                    mark: Mark::Same,
                    depth,
                    key: Some((*go).into()),
                    value: format!("{},", inline(*shape, new.get(*json), version)),
                    multi: false,
                });
            }
            if count > lo + hi {
                lines.push(Line {
                    mark: Mark::Same,
                    depth,
                    key: None,
                    value: format!("... // {} identical fields", count - lo - hi),
                    multi: true,
                });
            }
            for (go, json, shape) in &fields[i - hi..i] {
                lines.push(Line {
                    mark: Mark::Same,
                    depth,
                    key: Some((*go).into()),
                    value: format!("{},", inline(*shape, new.get(*json), version)),
                    multi: false,
                });
            }
        } else {
            let (go, json, shape) = fields[i];
            let (a, b) = (old.get(json), new.get(json));
            match shape {
                Shape::Resources if !is_zero(a) && !is_zero(b) => {
                    let type_name = match version {
                        KubeVersion::V1_28 => "core.ResourceRequirements{",
                        KubeVersion::V1_32 | KubeVersion::V1_36 => {
                            "core.VolumeResourceRequirements{"
                        }
                    };
                    lines.push(Line {
                        mark: Mark::Same,
                        depth,
                        key: Some(go.into()),
                        value: type_name.into(),
                        multi: true,
                    });
                    struct_diff(
                        lines,
                        &resource_fields(version),
                        a.unwrap_or(&Value::Null),
                        b.unwrap_or(&Value::Null),
                        depth + 1,
                        version,
                    );
                    lines.push(Line {
                        mark: Mark::Same,
                        depth,
                        key: None,
                        value: "},".into(),
                        multi: true,
                    });
                }
                _ => {
                    push_replaced(lines, Mark::Old, depth, go, shape, a, version);
                    push_replaced(lines, Mark::New, depth, go, shape, b, version);
                }
            }
            i += 1;
        }
    }
}

/// The diff of two claim specs (JSON), as the real server prints it: go-cmp's until 1.36,
/// a unified diff of the JSON from then on ([`super::pvc_json_diff`]).
pub fn spec_diff(old: &Value, new: &Value, version: KubeVersion) -> String {
    if version >= KubeVersion::V1_36 {
        return super::pvc_json_diff::spec_diff(old, new);
    }
    let mut lines = vec![Line {
        mark: Mark::Same,
        depth: 0,
        key: None,
        value: "core.PersistentVolumeClaimSpec{".into(),
        multi: true,
    }];
    struct_diff(&mut lines, &fields(version), old, new, 1, version);
    lines.push(Line {
        mark: Mark::Same,
        depth: 0,
        key: None,
        value: "}".into(),
        multi: true,
    });

    // Align keys within runs of one-line records at the same depth.
    let mut widths = vec![0usize; lines.len()];
    let mut i = 0;
    while i < lines.len() {
        if lines[i].multi || lines[i].key.is_none() {
            i += 1;
            continue;
        }
        let start = i;
        let depth = lines[i].depth;
        while i < lines.len()
            && !lines[i].multi
            && lines[i].key.is_some()
            && lines[i].depth == depth
        {
            i += 1;
        }
        let w = lines[start..i]
            .iter()
            .filter_map(|l| l.key.as_ref().map(String::len))
            .max()
            .unwrap_or(0);
        for slot in &mut widths[start..i] {
            *slot = w;
        }
    }

    let space = match version {
        KubeVersion::V1_28 => ' ',
        KubeVersion::V1_32 | KubeVersion::V1_36 => '\u{a0}',
    };
    let mut out = String::new();
    for (line, width) in lines.iter().zip(widths) {
        match line.mark {
            Mark::Same => {
                out.push(space);
                out.push(space);
            }
            Mark::Old => {
                out.push('-');
                out.push(space);
            }
            Mark::New => {
                out.push('+');
                out.push(space);
            }
        }
        for _ in 0..line.depth {
            out.push('\t');
        }
        if let Some(k) = &line.key {
            out.push_str(k);
            out.push(':');
            let pad = if width > 0 { width - k.len() + 1 } else { 1 };
            out.push_str(&" ".repeat(pad));
        }
        out.push_str(&line.value);
        out.push('\n');
    }
    out
}
