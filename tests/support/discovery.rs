//! Discovery (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) in the legacy
//! (unaggregated) form, which kubectl falls back to when the aggregated media type is not
//! offered. `/openapi/v2` and `/openapi/v3` answer 404, so kubectl skips client-side schema
//! validation (pass `--validate=false` to kubectl versions that insist).

use axum::body::Body;
use http::{Method, Response};
use serde_json::{Value, json};

use super::FakeApiServer;
use super::handlers::json_response;
use super::resources::{self, ResourceType};

fn verbs(rt: &ResourceType) -> Value {
    let _ = rt;
    json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ])
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = resources::ALL
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for rt in &types {
        let mut r = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs(rt),
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if rt.custom {
            r["categories"] = json!(["all", "fluxcd"]);
        }
        list.push(r);
        if rt.status_subresource {
            list.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list,
    }))
}

fn groups() -> Value {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for rt in resources::ALL.iter().filter(|r| !r.group.is_empty()) {
        if !seen.contains(&(rt.group, rt.version)) {
            seen.push((rt.group, rt.version));
        }
    }
    let groups: Vec<Value> = seen
        .iter()
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The discovery answer for `path`, if it is a discovery path.
pub fn answer(fake: &FakeApiServer, method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let path = path.trim_end_matches('/');
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let body = match segs.as_slice() {
        ["version"] => {
            let v = fake.version();
            json!({
                "major": "1",
                "minor": v.minor().to_string(),
                "gitVersion": v.git_version(),
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2026-11-29T00:00:00Z",
                "goVersion": "go1.22.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            })
        }
        ["api"] => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
        }),
        ["apis"] => groups(),
        ["api", v] => resource_list("", v)?,
        ["apis", g, v] => resource_list(g, v)?,
        ["apis", g] => {
            let all = groups();
            all["groups"]
                .as_array()?
                .iter()
                .find(|x| x["name"] == *g)
                .map(|x| {
                    let mut x = x.clone();
                    x["kind"] = json!("APIGroup");
                    x["apiVersion"] = json!("v1");
                    x
                })?
        }
        _ => return None,
    };
    Some(json_response(200, &body))
}
