//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which
//! `kubectl get` asks for: the columns of the real printers for the kinds this project reads
//! (priority-0 columns only; `-o wide` shows the same), `additionalPrinterColumns` of the Flux
//! CRDs, and Name/Age for the rest.

use serde_json::{Value, json};

use super::resources::{self, ResourceType};

/// kubectl's `duration.HumanDuration`.
pub fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else if h < 24 * 365 * 8 {
        format!("{}y{}d", d / 365, d % 365)
    } else {
        format!("{}y", d / 365)
    }
}

fn age(obj: &Value) -> String {
    let created = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match created {
        Some(t) => human_age(jiff::Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn s<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn n(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn access_modes(v: Option<&Value>) -> String {
    let short = |m: &str| match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        _ => "",
    };
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(short)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// The condition `type`'s field, as `.status.conditions[?(@.type=="Ready")].status` reads it.
fn condition(obj: &Value, kind: &str, field: &str) -> String {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .and_then(|c| c[field].as_str())
        .unwrap_or("")
        .to_string()
}

type Column = (&'static str, &'static str);

fn columns(rt: &ResourceType) -> Vec<Column> {
    let mut cols = vec![("Name", "string")];
    let rest: &[Column] = if *rt == resources::STATEFULSET {
        &[("Ready", "string"), ("Age", "string")]
    } else if *rt == resources::POD {
        &[
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "string"),
            ("Age", "string"),
        ]
    } else if *rt == resources::PVC {
        &[
            ("Status", "string"),
            ("Volume", "string"),
            ("Capacity", "string"),
            ("Access Modes", "string"),
            ("StorageClass", "string"),
            ("Age", "string"),
        ]
    } else if *rt == resources::CONTROLLER_REVISION {
        &[
            ("Controller", "string"),
            ("Revision", "integer"),
            ("Age", "string"),
        ]
    } else if *rt == resources::STORAGE_CLASS {
        &[
            ("Provisioner", "string"),
            ("ReclaimPolicy", "string"),
            ("VolumeBindingMode", "string"),
            ("AllowVolumeExpansion", "string"),
            ("Age", "string"),
        ]
    } else if *rt == resources::CONFIGMAP {
        &[("Data", "integer"), ("Age", "string")]
    } else if *rt == resources::KUSTOMIZATION {
        &[("Age", "date"), ("Ready", "string"), ("Status", "string")]
    } else if rt.custom {
        &[
            ("URL", "string"),
            ("Age", "date"),
            ("Ready", "string"),
            ("Status", "string"),
        ]
    } else {
        &[("Age", "string")]
    };
    cols.extend_from_slice(rest);
    cols
}

fn cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let name = s(obj, "/metadata/name").to_string();
    let a = age(obj);
    if *rt == resources::STATEFULSET {
        let ready = format!(
            "{}/{}",
            n(obj, "/status/readyReplicas"),
            n(obj, "/spec/replicas")
        );
        vec![json!(name), json!(ready), json!(a)]
    } else if *rt == resources::POD {
        let containers = obj
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let ready = if condition(obj, "Ready", "status") == "True" {
            containers
        } else {
            0
        };
        let status = if obj.pointer("/metadata/deletionTimestamp").is_some() {
            "Terminating".to_string()
        } else {
            s(obj, "/status/phase").to_string()
        };
        vec![
            json!(name),
            json!(format!("{ready}/{containers}")),
            json!(status),
            json!("0"),
            json!(a),
        ]
    } else if *rt == resources::PVC {
        let status = if obj.pointer("/metadata/deletionTimestamp").is_some() {
            "Terminating"
        } else {
            s(obj, "/status/phase")
        };
        let bound = s(obj, "/status/phase") == "Bound";
        vec![
            json!(name),
            json!(status),
            json!(s(obj, "/spec/volumeName")),
            json!(if bound {
                s(obj, "/status/capacity/storage")
            } else {
                ""
            }),
            json!(if bound {
                access_modes(obj.pointer("/status/accessModes"))
            } else {
                String::new()
            }),
            json!(s(obj, "/spec/storageClassName")),
            json!(a),
        ]
    } else if *rt == resources::CONTROLLER_REVISION {
        let controller = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|r| r.iter().find(|r| r["controller"] == json!(true)))
            .map(|r| {
                format!(
                    "{}.{}/{}",
                    r["kind"].as_str().unwrap_or("").to_lowercase(),
                    r["apiVersion"]
                        .as_str()
                        .unwrap_or("")
                        .split('/')
                        .next()
                        .unwrap_or(""),
                    r["name"].as_str().unwrap_or("")
                )
            })
            .unwrap_or_else(|| "<none>".into());
        vec![
            json!(name),
            json!(controller),
            json!(n(obj, "/revision")),
            json!(a),
        ]
    } else if *rt == resources::STORAGE_CLASS {
        let default = s(
            obj,
            "/metadata/annotations/storageclass.kubernetes.io~1is-default-class",
        ) == "true";
        let name = if default {
            format!("{name} (default)")
        } else {
            name
        };
        let reclaim = match s(obj, "/reclaimPolicy") {
            "" => "Delete",
            other => other,
        };
        let binding = match s(obj, "/volumeBindingMode") {
            "" => "Immediate",
            other => other,
        };
        let expand = obj
            .get("allowVolumeExpansion")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        vec![
            json!(name),
            json!(s(obj, "/provisioner")),
            json!(reclaim),
            json!(binding),
            json!(expand.to_string()),
            json!(a),
        ]
    } else if *rt == resources::CONFIGMAP {
        let data = ["data", "binaryData"]
            .iter()
            .filter_map(|k| obj.get(*k).and_then(Value::as_object))
            .map(|m| m.len())
            .sum::<usize>();
        vec![json!(name), json!(data), json!(a)]
    } else if *rt == resources::KUSTOMIZATION {
        vec![
            json!(name),
            json!(a),
            json!(condition(obj, "Ready", "status")),
            json!(condition(obj, "Ready", "message")),
        ]
    } else if rt.custom {
        let url = match s(obj, "/spec/url") {
            "" => s(obj, "/spec/endpoint"),
            u => u,
        };
        vec![
            json!(name),
            json!(url),
            json!(a),
            json!(condition(obj, "Ready", "status")),
            json!(condition(obj, "Ready", "message")),
        ]
    } else {
        vec![json!(name), json!(a)]
    }
}

/// Whether the client asked for a Table.
pub fn wants_table(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("as=Table"))
}

/// A Table of `items` (already filtered), each row carrying the object's metadata.
pub fn table(rt: &ResourceType, items: &[Value], resource_version: &str) -> Value {
    let columns: Vec<Value> = columns(rt)
        .into_iter()
        .map(|(name, ty)| {
            let mut c =
                json!({"name": name, "type": ty, "format": "", "description": "", "priority": 0});
            if name == "Name" {
                c["format"] = json!("name");
            }
            c
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            json!({
                "cells": cells(rt, o),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"].clone(),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    })
}
