//! Discovery (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) in the legacy
//! (unaggregated) form, which kubectl falls back to when the aggregated media type is not
//! offered, and a skeletal OpenAPI v3 (`/openapi/v3`, `/openapi/v3/apis/{group}/{version}`):
//! only the PATCH operations with their `x-kubernetes-group-version-kind` and the
//! `fieldValidation` parameter, which is what kubectl checks before it leaves validation to
//! the server. There are no schemas (the fake ignores `fieldValidation`); `/openapi/v2`, which
//! kubectl loads eagerly, is an empty document.

use axum::body::Body;
use http::{Method, Response};
use serde_json::{Value, json};

use super::resources::{self, ResourceType};
use super::response::json_response;
use super::reviews;
use super::store::{State, Store};

fn verbs() -> Value {
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

/// Every type `state`'s server serves (its version and gates decide VolumeAttributesClass),
/// the review APIs included.
fn served(state: &State) -> Vec<&'static ResourceType> {
    resources::ALL
        .iter()
        .filter(|r| state.serves(r))
        .chain(reviews::ALL)
        .collect()
}

fn resource_list(state: &State, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = served(state)
        .into_iter()
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
            "verbs": if reviews::ALL.contains(rt) { json!(["create"]) } else { verbs() },
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if rt.custom {
            r["categories"] = json!(["all", "fluxcd"]);
        }
        list.push(r);
        if **rt == resources::STATEFULSET {
            list.push(json!({
                "name": format!("{}/scale", rt.plural),
                "singularName": "",
                "namespaced": true,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if **rt == resources::POD {
            // The eviction subresource takes a policy/v1 Eviction (`EvictionREST`).
            list.push(json!({
                "name": format!("{}/eviction", rt.plural),
                "singularName": "",
                "namespaced": true,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
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

/// One entry per group, its served versions in the order the types list them (the stable one
/// first, as the real server prefers it: `storage.k8s.io` lists `v1` before `v1beta1`).
fn groups(state: &State) -> Value {
    let mut seen: Vec<(&str, Vec<&str>)> = Vec::new();
    for rt in served(state).into_iter().filter(|r| !r.group.is_empty()) {
        match seen.iter_mut().find(|(g, _)| *g == rt.group) {
            Some((_, versions)) if !versions.contains(&rt.version) => versions.push(rt.version),
            Some(_) => {}
            None => seen.push((rt.group, vec![rt.version])),
        }
    }
    let groups: Vec<Value> = seen
        .iter()
        .map(|(g, vs)| {
            let gvs: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": gvs, "preferredVersion": gvs[0].clone()})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn openapi_root(state: &State) -> Value {
    let mut paths = serde_json::Map::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for rt in resources::ALL.iter().filter(|r| state.serves(r)) {
        if seen.contains(&(rt.group, rt.version)) {
            continue;
        }
        seen.push((rt.group, rt.version));
        let key = if rt.group.is_empty() {
            format!("api/{}", rt.version)
        } else {
            format!("apis/{}/{}", rt.group, rt.version)
        };
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash=0")}),
        );
    }
    json!({"paths": paths})
}

fn openapi_group_version(state: &State, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for rt in resources::ALL
        .iter()
        .filter(|r| state.serves(r) && r.group == group && r.version == version)
    {
        let ns = if rt.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let path = format!("{}{ns}/{}/{{name}}", rt.group_version_path(), rt.plural);
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "force", "in": "query", "schema": {"type": "boolean"}}
                ],
                "responses": {"200": {"description": "OK"}}
            }}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1"},
        "paths": paths,
    }))
}

/// The discovery answer for `path`, if it is a discovery path.
pub fn answer(store: &Store, method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let path = path.trim_end_matches('/');
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs == ["openapi", "v2"] {
        // An empty protobuf message is a valid, empty OpenAPI v2 document: kubectl loads it
        // eagerly and then relies on v3 to learn that validation is server-side.
        return Some(
            Response::builder()
                .status(200)
                .header(
                    http::header::CONTENT_TYPE,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )
                .body(Body::empty())
                .expect("static response parts are valid"),
        );
    }
    let body = match segs.as_slice() {
        ["version"] => {
            let v = store.lock().version;
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
        ["apis"] => groups(&store.lock()),
        ["api", v] => resource_list(&store.lock(), "", v)?,
        ["apis", g, v] => resource_list(&store.lock(), g, v)?,
        ["openapi", "v3"] => openapi_root(&store.lock()),
        ["openapi", "v3", "api", v] => openapi_group_version(&store.lock(), "", v)?,
        ["openapi", "v3", "apis", g, v] => openapi_group_version(&store.lock(), g, v)?,
        ["apis", g] => {
            let all = groups(&store.lock());
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
