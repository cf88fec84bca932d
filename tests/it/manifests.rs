//! What ships to a cluster, checked as a cluster would see it: `manifests/` rendered with the real
//! kustomize (`kubectl kustomize`), its hardening and wiring; the Flux examples validated against
//! Flux's CRD schemas; the sidecar component rendered over a minimal flux-system; and the
//! Dockerfile, which cannot be built here, read for what can be known without building it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `kubectl kustomize DIR`, parsed: the objects `kubectl apply -k DIR` would send.
fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    flux_converger::flux::render::parse_stream(&text).expect("kustomize output parses")
}

fn base() -> Vec<Value> {
    kustomize(&repo("manifests"))
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} is rendered"))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("container {name}"))
}

/// Bytes of a memory quantity as the manifests write them (`Mi`/`Gi` only).
fn mebibytes(q: &Value) -> u64 {
    let s = q.as_str().unwrap_or_else(|| panic!("quantity {q}"));
    if let Some(n) = s.strip_suffix("Mi") {
        n.parse().unwrap()
    } else if let Some(n) = s.strip_suffix("Gi") {
        n.parse::<u64>().unwrap() * 1024
    } else {
        panic!("memory quantity {s}: write it in Mi or Gi")
    }
}

// ---- hardening, shared by the Deployment and the sidecar ----

/// The serve flags of the service's contract (docs/service.md); an argument outside it is a typo that
/// would stop the pod at start.
/// The flags `serve` takes, read from the binary's own `serve --help`, so a flag renamed in the
/// code or mistyped in a manifest (the pod would crash-loop) is caught, and no list here drifts.
fn serve_flags() -> &'static BTreeSet<String> {
    static FLAGS: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    FLAGS.get_or_init(|| {
        let help = Command::new(env!("CARGO_BIN_EXE_flux-converger"))
            .args(["serve", "--help"])
            .output()
            .expect("the binary runs");
        assert!(help.status.success(), "serve --help");
        String::from_utf8_lossy(&help.stdout)
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | '=' | '[' | '<'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_string)
            .collect()
    })
}

/// Every hardening rule the issue names, for one converger container of `pod`; returns what is
/// wrong, so a table of broken variants can prove each rule is checked.
fn hardening_problems(pod: &Value, c: &Value) -> Vec<String> {
    let mut p = Vec::new();
    let sc = &c["securityContext"];
    let psc = &pod["securityContext"];
    let either = |k: &str| {
        if sc[k].is_null() {
            psc[k].clone()
        } else {
            sc[k].clone()
        }
    };
    if either("runAsNonRoot") != json!(true) {
        p.push("runAsNonRoot is not true".to_string());
    }
    match either("runAsUser").as_u64() {
        Some(0) | None => p.push("runAsUser is not a non-root numeric user".into()),
        Some(_) => {}
    }
    if sc["readOnlyRootFilesystem"] != json!(true) {
        p.push("readOnlyRootFilesystem is not true".into());
    }
    if sc["allowPrivilegeEscalation"] != json!(false) {
        p.push("allowPrivilegeEscalation is not false".into());
    }
    if sc["capabilities"]["drop"] != json!(["ALL"]) || !sc["capabilities"]["add"].is_null() {
        p.push("capabilities are not exactly drop [ALL]".into());
    }
    if either("seccompProfile")["type"] != "RuntimeDefault" {
        p.push("seccompProfile is not RuntimeDefault".into());
    }
    if sc["privileged"] == json!(true) {
        p.push("privileged".into());
    }
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        if c[probe]["httpGet"]["path"] != path {
            p.push(format!("{probe} is not GET {path}"));
        }
    }
    let res = &c["resources"];
    for kind in ["cpu", "memory"] {
        if res["requests"][kind].is_null() {
            p.push(format!("no {kind} request"));
        }
    }
    if res["limits"]["memory"].is_null() {
        p.push("no memory limit".into());
    } else if !res["requests"]["memory"].is_null()
        && mebibytes(&res["limits"]["memory"]) < mebibytes(&res["requests"]["memory"])
    {
        p.push("memory limit below its request".into());
    }
    // The HMAC key comes from a Secret file, never from a literal in the manifest.
    let args: Vec<&str> = c["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if args.first() != Some(&"serve") {
        p.push("does not run `serve`".into());
    }
    for a in args.iter().skip(1) {
        let flag = a.split('=').next().unwrap_or(a);
        if !serve_flags().contains(flag) {
            p.push(format!("unknown serve flag {a}"));
        }
    }
    let mounts = c["volumeMounts"].as_array().cloned().unwrap_or_default();
    let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
    let volume = |mount_path: &str| -> Option<Value> {
        let m = mounts.iter().find(|m| {
            mount_path == m["mountPath"].as_str().unwrap_or_default()
                || mount_path.starts_with(&format!("{}/", m["mountPath"].as_str().unwrap_or("")))
        })?;
        volumes.iter().find(|v| v["name"] == m["name"]).cloned()
    };
    // The webhook is never open in a shipped manifest.
    if args
        .iter()
        .any(|a| a.starts_with("--allow-unauthenticated-hooks"))
    {
        p.push("/hook is served unauthenticated".into());
    }
    match args.iter().find_map(|a| a.strip_prefix("--hmac-key-file=")) {
        None => p.push("no --hmac-key-file".into()),
        Some(file) => match volume(file) {
            Some(v) if !v["secret"]["secretName"].is_null() => {}
            _ => p.push(format!("{file} is not on a Secret volume")),
        },
    }
    // Argo CD's API token and the hook's, likewise (manifests/argocd).
    for flag in ["--argocd-token-file", "--argocd-hook-token-file"] {
        if let Some(file) = args
            .iter()
            .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        {
            match volume(file) {
                Some(v) if !v["secret"]["secretName"].is_null() => {}
                _ => p.push(format!("{file} is not on a Secret volume")),
            }
        }
    }
    let env = c["env"].as_array().cloned().unwrap_or_default();
    let tmpdir = env
        .iter()
        .find(|e| e["name"] == "TMPDIR")
        .and_then(|e| e["value"].as_str().map(str::to_string));
    match tmpdir {
        None => p.push("no TMPDIR for the render's scratch space".into()),
        Some(dir) => match volume(&dir) {
            Some(v) if v["emptyDir"].is_object() => {}
            _ => p.push(format!("TMPDIR {dir} is not a writable emptyDir")),
        },
    }
    if !env.iter().any(|e| {
        e["name"] == "FLUX_CONVERGER_NAMESPACE"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    }) {
        p.push("the namespace of its records is not the pod's own".into());
    }
    p
}

/// The value of a `--flag=VALUE` argument of container `c`.
fn flag_value(c: &Value, flag: &str) -> Option<String> {
    c["args"]
        .as_array()?
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix(&format!("{flag}=")))
        .map(String::from)
}

/// The port of a `--flag=:PORT` or `--flag=HOST:PORT` argument of container `c`.
fn flag_port(c: &Value, flag: &str) -> u64 {
    let prefix = format!("{flag}=");
    c["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix(prefix.as_str()))
        .and_then(|addr| addr.rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{flag}=ADDR is set"))
}

/// The containerPort of container `c`'s port named `name`.
fn container_port(c: &Value, name: &str) -> Option<u64> {
    c["ports"].as_array()?.iter().find(|p| p["name"] == name)?["containerPort"].as_u64()
}

fn deployment_pod(objects: &[Value]) -> Value {
    find(objects, "Deployment", "flux-converger")["spec"]["template"]["spec"].clone()
}

#[test]
fn base_renders_the_install_in_flux_system() {
    let objects = base();
    let kinds: BTreeSet<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let expected: BTreeSet<String> = [
        "ServiceAccount/flux-converger",
        "ClusterRole/flux-converger",
        "ClusterRoleBinding/flux-converger",
        "Role/flux-converger",
        "RoleBinding/flux-converger",
        "Deployment/flux-converger",
        "Service/flux-converger",
        "NetworkPolicy/flux-converger",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(kinds, expected);
    for o in &objects {
        let cluster_scoped = matches!(
            o["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        );
        let ns = o["metadata"]["namespace"].as_str();
        assert_eq!(
            ns,
            (!cluster_scoped).then_some("flux-system"),
            "{} {}",
            o["kind"],
            o["metadata"]["name"]
        );
    }
}

#[test]
fn deployment_is_hardened_and_wired() {
    let objects = base();
    let pod = deployment_pod(&objects);
    let c = container(&pod, "manager");
    assert_eq!(hardening_problems(&pod, c), Vec::<String>::new());
    assert_eq!(pod["serviceAccountName"], "flux-converger");
    // Opt-in per Kustomization: a default gate would take over flux-system's own Kustomization.
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--default-gate=off"))
    );
    // The request holds serve and one render, the limit serve and one render per worker.
    let workers: u64 = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--workers="))
        .expect("--workers is set")
        .parse()
        .unwrap();
    // serve budgeted at 64 MB; measured kustomize's peak on a 2,000-object render 98,684 KiB.
    let (serve_mb, render_mb) = (64, 97);
    assert!(mebibytes(&c["resources"]["requests"]["memory"]) >= serve_mb + render_mb);
    assert!(mebibytes(&c["resources"]["limits"]["memory"]) >= serve_mb + workers * render_mb);
    // Flux's layout: `http` on the receiver port 9292 (--listen: /hook, /status, the dashboard,
    // the probes), `http-prom` on 8080 (--metrics-addr: /metrics alone), named as Flux names them.
    assert_eq!(flag_port(c, "--listen"), 9292);
    assert_eq!(flag_port(c, "--metrics-addr"), 8080);
    assert_eq!(container_port(c, "http"), Some(9292));
    assert_eq!(container_port(c, "http-prom"), Some(8080));
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let annotations = &find(&objects, "Deployment", "flux-converger")["spec"]["template"]["metadata"]
        ["annotations"];
    assert_eq!(
        annotations["prometheus.io/port"], "8080",
        "scraped on http-prom"
    );
    // The Service carries the webhook and the dashboard, not the metrics.
    let svc = find(&objects, "Service", "flux-converger");
    let targets: Vec<&Value> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["targetPort"])
        .collect();
    assert_eq!(targets, vec![&json!("http"), &json!("http-artifacts")]);
    // The `artifact` gate's server: the address written into ExternalArtifact URLs is this
    // Service's, on the port the container serves artifacts on, with storage on a volume.
    assert_eq!(flag_port(c, "--storage-addr"), 9090);
    assert_eq!(container_port(c, "http-artifacts"), Some(9090));
    let artifacts = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["targetPort"] == "http-artifacts")
        .unwrap();
    assert_eq!(
        flag_value(c, "--storage-adv-addr"),
        Some(format!(
            "flux-converger.$(FLUX_CONVERGER_NAMESPACE).svc.cluster.local.:{}",
            artifacts["port"]
        ))
    );
    let path = flag_value(c, "--storage-path").expect("--storage-path is set");
    assert!(
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == path.as_str()),
        "the storage is a volume (the root filesystem is read-only)"
    );
    // kustomize-controller (and the other replicas) may reach the artifact port.
    let policy = find(&objects, "NetworkPolicy", "flux-converger");
    let artifact_peers: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| rule["ports"][0]["port"] == "http-artifacts")
        .flat_map(|rule| rule["from"].as_array().unwrap())
        .map(|peer| &peer["podSelector"]["matchLabels"]["app"])
        .collect();
    assert_eq!(
        artifact_peers,
        vec![&json!("kustomize-controller"), &json!("flux-converger")]
    );
    let labels =
        &find(&objects, "Deployment", "flux-converger")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "the Service selects the pods");
    }
}

/// A release ships the image of its own version, in both variants.
#[test]
fn images_are_the_crate_version() {
    let tag = format!(
        "ghcr.io/flux-converger/flux-converger:v{}",
        env!("CARGO_PKG_VERSION")
    );
    let pod = deployment_pod(&base());
    assert_eq!(container(&pod, "manager")["image"], tag.as_str());
    let patch =
        std::fs::read_to_string(repo("manifests/sidecar/kustomize-controller-patch.yaml")).unwrap();
    let patch = flux_converger::flux::render::parse_stream(&patch).unwrap();
    let sidecar = container(&patch[0]["spec"]["template"]["spec"], "flux-converger");
    assert_eq!(sidecar["image"], tag.as_str());
    // The sharding component sets the tag of every shard.
    for deploy in sharded_objects()
        .iter()
        .filter(|o| o["kind"] == "Deployment")
    {
        let pod = &deploy["spec"]["template"]["spec"];
        assert_eq!(container(pod, "manager")["image"], tag.as_str());
    }
}

#[test]
fn each_hardening_rule_is_checked_by_table() {
    let pod = deployment_pod(&base());
    let idx = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["name"] == "manager")
        .unwrap();
    type Break = fn(&mut Value);
    let cases: &[(&str, Break, &str)] = &[
        (
            "root",
            |p| p["securityContext"]["runAsUser"] = json!(0),
            "runAsUser",
        ),
        (
            "writable root",
            |p| p["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = json!(false),
            "readOnlyRootFilesystem",
        ),
        (
            "escalation",
            |p| p["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true),
            "allowPrivilegeEscalation",
        ),
        (
            "a capability",
            |p| p["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["NET_ADMIN"]),
            "capabilities",
        ),
        (
            "unconfined",
            |p| {
                p["containers"][0]["securityContext"]["seccompProfile"] =
                    json!({"type": "Unconfined"});
            },
            "seccompProfile",
        ),
        (
            "no limit",
            |p| p["containers"][0]["resources"]["limits"] = json!({}),
            "memory limit",
        ),
        (
            "liveness",
            |p| p["containers"][0]["livenessProbe"]["httpGet"]["path"] = json!("/"),
            "livenessProbe",
        ),
        (
            "typo",
            |p| {
                p["containers"][0]["args"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("--worker=2"))
            },
            "unknown serve flag",
        ),
        ("key inline", |p| p["volumes"] = json!([]), "Secret volume"),
        (
            "open webhook",
            |p| {
                p["containers"][0]["args"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("--allow-unauthenticated-hooks"))
            },
            "unauthenticated",
        ),
    ];
    for (what, brk, expected) in cases {
        let mut p = pod.clone();
        p["containers"] = json!([pod["containers"][idx].clone()]);
        brk(&mut p);
        let problems = hardening_problems(&p, &p["containers"][0].clone());
        assert!(
            problems.iter().any(|m| m.contains(expected)),
            "{what}: {problems:?}"
        );
    }
}

/// The install never writes a pod but through the Eviction API (`create` on `pods/eviction`,
/// for `restart-for-resize`, issue #38: a PodDisruptionBudget holds it), reads pods only to
/// see them Ready, never deletes claims, never uses a wildcard.
#[test]
fn rbac_writes_pods_only_by_eviction_never_deletes_claims_never_wildcards() {
    let objects = base();
    for o in objects
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole" | "Role")))
    {
        for rule in o["rules"].as_array().unwrap() {
            let strs = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default()
            };
            for k in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !strs(k).iter().any(|s| s.contains('*')),
                    "{} has a wildcard: {rule}",
                    o["kind"]
                );
            }
            let resources = strs("resources");
            let verbs = strs("verbs");
            for r in resources.iter().filter(|r| r.starts_with("pods")) {
                match r.as_str() {
                    "pods" => assert!(
                        verbs
                            .iter()
                            .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
                        "pods are only read: {rule}"
                    ),
                    "pods/eviction" => assert_eq!(verbs, ["create"], "{rule}"),
                    _ => panic!("no other pod resource: {rule}"),
                }
            }
            if resources.iter().any(|r| r == "persistentvolumeclaims") {
                for v in ["create", "delete", "deletecollection", "update"] {
                    assert!(!verbs.iter().any(|x| x == v), "claims: {v} in {rule}");
                }
            }
            assert!(
                !verbs
                    .iter()
                    .any(|v| v == "deletecollection" || v == "escalate" || v == "bind"),
                "{rule}"
            );
            // Cluster-wide, Secrets (substituteFrom) are read one by one, never listed; in its
            // own namespace (the Role) they are its intents journal.
            if resources.iter().any(|r| r == "secrets") && o["kind"] == "ClusterRole" {
                assert_eq!(
                    verbs,
                    ["get"],
                    "secrets are read one by one, never listed: {rule}"
                );
            }
        }
    }
    // Each binding grants to the Deployment's service account, in flux-system.
    let sa = deployment_pod(&objects)["serviceAccountName"].clone();
    for o in objects.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ClusterRoleBinding" | "RoleBinding")
        )
    }) {
        assert_eq!(
            o["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "flux-system"}])
        );
        assert!(
            find(
                &objects,
                if o["kind"] == "RoleBinding" {
                    "Role"
                } else {
                    "ClusterRole"
                },
                o["roleRef"]["name"].as_str().unwrap()
            )["kind"]
                .is_string()
        );
    }
}

#[test]
fn network_policy_admits_flux_and_prometheus_and_reaches_source_controller() {
    let objects = base();
    let np = find(&objects, "NetworkPolicy", "flux-converger");
    let pod_labels =
        &find(&objects, "Deployment", "flux-converger")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in np["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&pod_labels[k], v);
    }
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    // Only notification-controller reaches `http` (/hook, /status, the dashboard); `http-prom`
    // (/metrics alone) is open to every namespace, as Flux's allow-scraping opens 8080.
    let ingress = np["spec"]["ingress"].as_array().unwrap();
    let reaching = |port: &str| -> Vec<&Value> {
        ingress
            .iter()
            .filter(|r| {
                r["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == port)
            })
            .map(|r| &r["from"])
            .collect()
    };
    assert_eq!(
        reaching("http"),
        vec![&json!([{"podSelector": {"matchLabels": {"app": "notification-controller"}}}])]
    );
    assert_eq!(
        reaching("http-prom"),
        vec![&json!([{"namespaceSelector": {}}])]
    );
    // kustomize-controller downloads published artifacts (the `artifact` gate); the other
    // replicas fetch what the leader published.
    assert_eq!(
        reaching("http-artifacts"),
        vec![&json!([
            {"podSelector": {"matchLabels": {"app": "kustomize-controller"}}},
            {"podSelector": {"matchLabels": {"app": "flux-converger"}}}
        ])]
    );
    assert_eq!(ingress.len(), 3, "no other way in: {ingress:?}");
    let egress = np["spec"]["egress"].as_array().unwrap();
    assert!(
        egress
            .iter()
            .any(|r| r["to"][0]["podSelector"]["matchLabels"]["app"] == "source-controller")
    );
    assert!(egress.iter().any(|r| {
        r["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 443)
    }));
    assert!(egress.iter().any(|r| {
        r["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 53)
    }));
}

// ---- the Flux examples against Flux's CRD schemas ----

/// The openAPI v3 subset Flux's CRDs use for structure: types, required fields, enums, lengths,
/// bounds, unknown fields. (`pattern` and CEL rules are not evaluated: no regex or CEL here.)
fn validate(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        if !(v.is_i64() || v.is_u64() || v.is_string()) {
            errors.push(format!("{path}: not an int or string"));
        }
        return;
    }
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    };
    if !ok {
        errors.push(format!("{path}: expected {ty}, got {v}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        errors.push(format!("{path}: {v} not one of {allowed:?}"));
    }
    if let Some(s) = v.as_str() {
        let n = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| n < m)
            || schema["maxLength"].as_u64().is_some_and(|m| n > m)
        {
            errors.push(format!("{path}: length {n} out of bounds"));
        }
    }
    if let Some(n) = v.as_f64()
        && (schema["minimum"].as_f64().is_some_and(|m| n < m)
            || schema["maximum"].as_f64().is_some_and(|m| n > m))
    {
        errors.push(format!("{path}: {n} out of bounds"));
    }
    if let Some(items) = v.as_array() {
        if schema["minItems"]
            .as_u64()
            .is_some_and(|m| (items.len() as u64) < m)
        {
            errors.push(format!("{path}: fewer than {} items", schema["minItems"]));
        }
        for (i, item) in items.iter().enumerate() {
            validate(&schema["items"], item, &format!("{path}[{i}]"), errors);
        }
    }
    if let Some(map) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            if !map.contains_key(r.as_str().unwrap_or_default()) {
                errors.push(format!(
                    "{path}.{}: required",
                    r.as_str().unwrap_or_default()
                ));
            }
        }
        let props = schema["properties"].as_object();
        for (k, child) in map {
            let sub = format!("{path}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(s, child, &sub, errors),
                None if schema["additionalProperties"].is_object() => {
                    validate(&schema["additionalProperties"], child, &sub, errors)
                }
                None if props.is_some()
                    && schema["x-kubernetes-preserve-unknown-fields"] != json!(true) =>
                {
                    errors.push(format!("{sub}: unknown field"))
                }
                None => {}
            }
        }
    }
}

/// `(group, version, kind)` → the served version's schema, from tests/fixtures/flux-crds.
fn flux_schemas() -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(repo("tests/fixtures/flux-crds")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for crd in flux_converger::flux::render::parse_stream(&text).unwrap() {
            let group = crd["spec"]["group"].as_str().unwrap().to_string();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
            for v in crd["spec"]["versions"].as_array().unwrap() {
                if v["served"] == json!(true) {
                    let version = v["name"].as_str().unwrap().to_string();
                    out.insert(
                        (group.clone(), version, kind.clone()),
                        v["schema"]["openAPIV3Schema"].clone(),
                    );
                }
            }
        }
    }
    out
}

fn flux_problems(
    schemas: &BTreeMap<(String, String, String), Value>,
    o: &Value,
) -> Option<Vec<String>> {
    let (group, version) = o["apiVersion"].as_str()?.split_once('/')?;
    let key = (
        group.to_string(),
        version.to_string(),
        o["kind"].as_str()?.to_string(),
    );
    if !group.ends_with(".toolkit.fluxcd.io") {
        return None;
    }
    let mut errors = Vec::new();
    match schemas.get(&key) {
        None => errors.push(format!("{key:?} is not a served Flux kind")),
        Some(schema) => validate(
            schema,
            o,
            &format!("{}/{}", key.2, o["metadata"]["name"]),
            &mut errors,
        ),
    }
    Some(errors)
}

#[test]
fn examples_validate_against_flux_crds() {
    let schemas = flux_schemas();
    let objects = kustomize(&repo("manifests/examples"));
    let mut checked = BTreeSet::new();
    for o in &objects {
        if let Some(errors) = flux_problems(&schemas, o) {
            assert_eq!(errors, Vec::<String>::new());
            checked.insert(o["kind"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        checked,
        [
            "Alert",
            "ExternalArtifact",
            "GitRepository",
            "Kustomization",
            "Provider"
        ]
        .map(String::from)
        .into()
    );
    // The wiring agrees with itself and with the install.
    let provider = find(&objects, "Provider", "flux-converger");
    assert_eq!(provider["spec"]["type"], "generic-hmac");
    let install = base();
    let svc = find(&install, "Service", "flux-converger");
    assert_eq!(
        provider["spec"]["address"],
        format!(
            "http://{}.{}.svc.cluster.local./hook",
            svc["metadata"]["name"].as_str().unwrap(),
            svc["metadata"]["namespace"].as_str().unwrap()
        )
    );
    let secret = find(
        &objects,
        "Secret",
        provider["spec"]["secretRef"]["name"].as_str().unwrap(),
    );
    assert!(
        secret["stringData"]["token"].is_string(),
        "generic-hmac signs with the key `token`"
    );
    let volumes = deployment_pod(&install)["volumes"].clone();
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == secret["metadata"]["name"]),
        "the service checks with the Provider's key"
    );
    let alert = find(&objects, "Alert", "flux-converger");
    assert_eq!(alert["spec"]["providerRef"]["name"], "flux-converger");
    let kinds: BTreeSet<&str> = alert["spec"]["eventSources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["Bucket", "GitRepository", "Kustomization", "OCIRepository"])
    );
    let gated = find(&objects, "Kustomization", "databases");
    assert_eq!(
        gated["metadata"]["annotations"]["flux-converger.io/gate"],
        "suspend"
    );
    assert_eq!(
        gated["spec"]["suspend"], true,
        "a suspend gate starts suspended"
    );
    let own = find(&objects, "Kustomization", "flux-converger");
    assert_eq!(own["spec"]["path"], "./manifests");
}

#[test]
fn the_schema_check_refuses_broken_flux_objects_by_table() {
    let schemas = flux_schemas();
    let objects = kustomize(&repo("manifests/examples"));
    type Break = fn(&mut Value);
    let cases: &[(&str, &str, Break, &str)] = &[
        (
            "Provider",
            "flux-converger",
            |o| o["spec"]["type"] = json!("generic-hmak"),
            "not one of",
        ),
        (
            "Provider",
            "flux-converger",
            |o| {
                o["spec"].as_object_mut().unwrap().remove("type");
            },
            ".spec.type: required",
        ),
        (
            "Kustomization",
            "databases",
            |o| {
                o["spec"].as_object_mut().unwrap().remove("sourceRef");
            },
            "sourceRef: required",
        ),
        (
            "Kustomization",
            "databases",
            |o| o["spec"]["suspend"] = json!("yes"),
            "expected boolean",
        ),
        (
            "Alert",
            "flux-converger",
            |o| o["spec"]["eventSources"][0]["kind"] = json!("Deployment"),
            "not one of",
        ),
        (
            "GitRepository",
            "flux-converger",
            |o| o["spec"]["reff"] = json!({}),
            "unknown field",
        ),
    ];
    for (kind, name, brk, expected) in cases {
        let mut o = find(&objects, kind, name).clone();
        brk(&mut o);
        let errors = flux_problems(&schemas, &o).unwrap();
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{kind}/{name}: {errors:?}"
        );
    }
}

// ---- the sidecar component over a minimal flux-system ----

/// What `flux bootstrap` commits, cut to what the component touches.
fn flux_system() -> String {
    std::fs::read_to_string(repo("tests/data/flux-system/gotk-components.yaml")).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A bootstrap flux-system with the sidecar component, rendered.
fn sidecar_objects() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let fs = dir.path().join("flux-system");
    std::fs::create_dir_all(&fs).unwrap();
    std::fs::write(fs.join("gotk-components.yaml"), flux_system()).unwrap();
    std::fs::write(
        fs.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - gotk-components.yaml\ncomponents:\n  - flux-converger\n",
    )
    .unwrap();
    copy_dir(&repo("manifests/sidecar"), &fs.join("flux-converger"));
    kustomize(&fs)
}

#[test]
fn sidecar_component_patches_a_bootstrap_flux_system() {
    let objects = sidecar_objects();

    let deploy = find(&objects, "Deployment", "kustomize-controller");
    let pod = &deploy["spec"]["template"]["spec"];
    // kustomize-controller itself is untouched.
    let original = flux_converger::flux::render::parse_stream(&flux_system()).unwrap();
    let original_pod =
        &find(&original, "Deployment", "kustomize-controller")["spec"]["template"]["spec"];
    assert_eq!(
        container(pod, "manager"),
        container(original_pod, "manager")
    );
    assert_eq!(
        pod["serviceAccountName"], "kustomize-controller",
        "the sidecar shares its service account"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "temp")
    );
    // The converger runs beside it, hardened, on a port of its own.
    let c = container(pod, "flux-converger");
    assert_eq!(hardening_problems(pod, c), Vec::<String>::new());
    let ports: Vec<u64> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    let unique: BTreeSet<u64> = ports.iter().copied().collect();
    assert_eq!(unique.len(), ports.len(), "no port clash: {ports:?}");
    // kustomize-controller keeps 8080 (metrics) and 9440 (health); the converger's two ports
    // are its own and named.
    let listen_port = flag_port(c, "--listen");
    let metrics_port = flag_port(c, "--metrics-addr");
    assert_eq!((listen_port, metrics_port), (9292, 9293));
    assert_eq!(container_port(c, "http-converger"), Some(listen_port));
    assert_eq!(container_port(c, "prom-converger"), Some(metrics_port));
    assert_eq!(c["ports"][0]["name"], "http-converger");
    // Its own Service reaches that port, at the address the example Provider posts to.
    let svc = find(&objects, "Service", "flux-converger");
    assert_eq!(svc["metadata"]["namespace"], "flux-system");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app": "kustomize-controller"})
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], c["ports"][0]["name"]);
    let np = find(&objects, "NetworkPolicy", "flux-converger-sidecar");
    assert_eq!(
        np["spec"]["ingress"],
        json!([
            {"from": [{"podSelector": {"matchLabels": {"app": "notification-controller"}}}],
             "ports": [{"port": listen_port, "protocol": "TCP"}]},
            {"from": [{"namespaceSelector": {}}],
             "ports": [{"port": metrics_port, "protocol": "TCP"}]}
        ])
    );
    // Nothing else: the component adds no RBAC (the pod's account already has Flux's rights).
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"].as_str().is_some_and(|k| k.contains("Role")))
    );
}

/// The ExternalArtifact feature gate component over a bootstrap flux-system: the flag is
/// appended to kustomize-controller's arguments, every other argument kept.
#[test]
fn external_artifact_component_turns_the_feature_gate_on() {
    let dir = tempfile::tempdir().unwrap();
    let fs = dir.path().join("flux-system");
    std::fs::create_dir_all(&fs).unwrap();
    std::fs::write(fs.join("gotk-components.yaml"), flux_system()).unwrap();
    std::fs::write(
        fs.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - gotk-components.yaml\ncomponents:\n  - external-artifact\n",
    )
    .unwrap();
    copy_dir(
        &repo("manifests/examples/external-artifact"),
        &fs.join("external-artifact"),
    );
    let objects = kustomize(&fs);
    let original = flux_converger::flux::render::parse_stream(&flux_system()).unwrap();
    let args = |objects: &[Value]| -> Vec<Value> {
        let pod = &find(objects, "Deployment", "kustomize-controller")["spec"]["template"]["spec"];
        container(pod, "manager")["args"]
            .as_array()
            .unwrap()
            .clone()
    };
    let mut expected = args(&original);
    assert!(!expected.is_empty());
    expected.push(json!("--feature-gates=ExternalArtifact=true"));
    assert_eq!(args(&objects), expected);
}

/// The sidecar serves the artifact gate's artifacts on localhost, to kustomize-controller in
/// the same pod, from a volume.
#[test]
fn sidecar_serves_artifacts_on_localhost() {
    let objects = sidecar_objects();
    let pod = &find(&objects, "Deployment", "kustomize-controller")["spec"]["template"]["spec"];
    let c = container(pod, "flux-converger");
    assert_eq!(
        flag_value(c, "--storage-adv-addr").as_deref(),
        Some("localhost:9090")
    );
    assert_eq!(flag_port(c, "--storage-addr"), 9090);
    assert_eq!(container_port(c, "http-artifacts"), Some(9090));
    let path = flag_value(c, "--storage-path").unwrap();
    assert!(
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == path.as_str())
    );
}

// ---- the sharding component over the install ----

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The install with the sharding component (manifests/examples/sharding), rendered as a fleet
/// repository would use it (kustomize refuses a component inside the base it patches).
fn sharded_objects() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo("manifests"), &dir.path().join("flux-converger"));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - flux-converger\ncomponents:\n  - flux-converger/examples/sharding\n",
    )
    .unwrap();
    kustomize(dir.path())
}

/// One Deployment per shard, as Flux shards its controllers: each hardened, watching its own
/// Kustomizations, with a selector of its own and a Service of its own; the second is the
/// first with only its shard changed (so the copy cannot drift from the install).
#[test]
fn sharding_component_runs_one_deployment_per_shard() {
    let objects = sharded_objects();
    let deployments: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        deployments,
        ["flux-converger-shard1", "flux-converger-shard2"]
    );
    let mut pods = Vec::new();
    for shard in ["shard1", "shard2"] {
        let deploy = find(&objects, "Deployment", &format!("flux-converger-{shard}"));
        assert_eq!(deploy["metadata"]["namespace"], "flux-system", "{shard}");
        let pod = &deploy["spec"]["template"]["spec"];
        let c = container(pod, "manager");
        assert_eq!(hardening_problems(pod, c), Vec::<String>::new(), "{shard}");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let selectors: Vec<&&str> = args
            .iter()
            .filter(|a| a.starts_with("--watch-label-selector"))
            .collect();
        assert_eq!(
            selectors,
            [&format!("--watch-label-selector=sharding.fluxcd.io/key={shard}").as_str()],
            "{shard}"
        );
        assert!(args.contains(&"--leader-elect"), "{shard}");
        // Its own pods only: the two Deployments' selectors do not overlap.
        let labels = json!({"app": "flux-converger", "sharding.fluxcd.io/key": shard});
        assert_eq!(deploy["spec"]["selector"]["matchLabels"], labels, "{shard}");
        let template_labels = &deploy["spec"]["template"]["metadata"]["labels"];
        assert_eq!(template_labels["sharding.fluxcd.io/key"], shard, "{shard}");
        let svc = find(&objects, "Service", &format!("flux-converger-{shard}"));
        assert_eq!(svc["metadata"]["namespace"], "flux-system", "{shard}");
        assert_eq!(svc["spec"]["selector"], labels, "{shard}");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http", "{shard}");
        pods.push(deploy.clone());
    }
    let second_as_first: Value =
        serde_json::from_str(&pods[1].to_string().replace("shard2", "shard1")).unwrap();
    assert_eq!(
        second_as_first, pods[0],
        "shard2 differs from shard1 beyond its shard"
    );
}

// ---- the multi-tenant lockdown over the install ----

/// The install with the multi-tenant component (manifests/examples/multi-tenant), as a
/// platform team's fleet repository would use it.
fn multi_tenant_objects() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo("manifests"), &dir.path().join("flux-converger"));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - flux-converger\ncomponents:\n  - flux-converger/examples/multi-tenant\n",
    )
    .unwrap();
    kustomize(dir.path())
}

fn args_of(c: &Value) -> Vec<String> {
    c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The lockdown a multi-tenant Flux sets on kustomize-controller, set the same way on the
/// converger (docs/operating.md, "Multi-tenant lockdown"), with the install's args kept and
/// the review rights --status-auth=kubernetes needs in the install's ClusterRole.
#[test]
fn multi_tenant_component_sets_flux_lockdown_and_status_auth() {
    let objects = multi_tenant_objects();
    let pod = deployment_pod(&objects);
    let c = container(&pod, "manager");
    assert_eq!(hardening_problems(&pod, c), Vec::<String>::new());
    let args = args_of(c);
    for flag in [
        "--no-cross-namespace-refs=true",
        "--no-remote-bases=true",
        "--default-service-account=default",
        "--status-auth=kubernetes",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    let base_pod = deployment_pod(&base());
    let base_args = args_of(container(&base_pod, "manager"));
    assert_eq!(
        args[..base_args.len()],
        base_args[..],
        "the install's args are kept"
    );
    // The reviews --status-auth=kubernetes sends are the install's own grants.
    let role = find(&objects, "ClusterRole", "flux-converger");
    for (group, resource) in [
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ] {
        assert!(
            role["rules"].as_array().unwrap().iter().any(|r| {
                r["apiGroups"] == json!([group])
                    && r["resources"] == json!([resource])
                    && r["verbs"] == json!(["create"])
            }),
            "{resource}"
        );
    }
}

/// The kubelet sends SIGKILL `terminationGracePeriodSeconds` after SIGTERM: it must exceed
/// the longest stop of the service as the pod runs it (its `--timeout` and `--shutdown-grace`,
/// else the defaults), or the kill cuts a converge between its orphan delete and its re-apply
/// after all.
#[test]
fn termination_grace_outlasts_the_longest_stop() {
    let longest = |c: &Value| {
        let flag = |name: &str| {
            c["args"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|a| a.as_str()?.strip_prefix(name)?.strip_prefix('='))
                .map(|t| humantime::parse_duration(t).unwrap())
        };
        let mut tuning = flux_converger::service::Tuning::default();
        if let Some(grace) = flag("--shutdown-grace") {
            tuning.shutdown_grace = grace;
        }
        tuning.longest_stop(
            flag("--timeout").unwrap_or(flux_converger::flux::objects::DEFAULT_CALL_TIMEOUT),
        )
    };
    let objects = base();
    let pod = deployment_pod(&objects);
    let sidecar =
        find(&sidecar_objects(), "Deployment", "kustomize-controller")["spec"]["template"]["spec"]
            .clone();
    for (what, pod, container_name) in [
        ("Deployment", &pod, "manager"),
        ("sidecar", &sidecar, "flux-converger"),
    ] {
        let longest = longest(container(pod, container_name));
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        assert!(
            std::time::Duration::from_secs(grace) > longest,
            "{what}: terminationGracePeriodSeconds {grace} does not outlast the longest stop {longest:?}"
        );
    }
}

// ---- the image ----

/// One Dockerfile instruction: keyword and its argument text, continuation lines joined.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            current.push_str(cont);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (k, rest) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        out.push((k.to_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<(String, String)>,
}

fn stages() -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    for (k, arg) in dockerfile() {
        if k == "FROM" {
            let words: Vec<&str> = arg.split_whitespace().collect();
            let name = (words.len() == 3 && words[1].eq_ignore_ascii_case("as"))
                .then(|| words[2].to_string());
            out.push(Stage {
                from: words[0].to_string(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(s) = out.last_mut() {
            s.instructions.push((k, arg));
        }
    }
    out
}

/// `NAME="value with spaces"` pairs of an ENV instruction.
fn env_pairs(arg: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = arg.trim();
    while let Some((name, after)) = rest.split_once('=') {
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').expect("closing quote");
            (&q[..end], &q[end + 1..])
        } else {
            after.split_once(char::is_whitespace).unwrap_or((after, ""))
        };
        out.push((name.trim().to_string(), value.to_string()));
        rest = next.trim();
    }
    out
}

#[test]
fn dockerfile_builds_pinned_and_runs_non_root_with_everything_it_execs() {
    let stages = stages();
    assert!(stages.len() >= 2, "multi-stage");
    let build = stages
        .iter()
        .find(|s| s.name.as_deref() == Some("build"))
        .expect("a build stage");
    // The toolchain is pinned to a full version, at least the crate's rust-version.
    let tag = build.from.rsplit_once(':').map(|(_, t)| t).unwrap();
    let version: Vec<u64> = tag
        .split('-')
        .next()
        .unwrap()
        .split('.')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(version.len(), 3, "rust image pinned to x.y.z: {tag}");
    let cargo = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
    let min = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let min: Vec<u64> = min.split('.').map(|n| n.parse().unwrap()).collect();
    assert!(
        version[..2] >= min[..2],
        "toolchain {tag} below rust-version"
    );
    assert!(
        build
            .instructions
            .iter()
            .any(|(k, a)| k == "RUN" && a.contains("--locked")),
        "builds from Cargo.lock"
    );
    // Every stage's base is pinned (no `latest`, no bare name).
    for s in &stages {
        let tag = s.from.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
        assert!(
            !tag.is_empty() && tag != "latest",
            "{} is not pinned",
            s.from
        );
    }
    let kustomize = stages
        .iter()
        .find(|s| s.name.as_deref() == Some("kustomize"))
        .expect("a kustomize stage");
    assert!(
        kustomize
            .instructions
            .iter()
            .any(|(k, a)| k == "ARG" && a.starts_with("KUSTOMIZE_VERSION=v5.")),
        "kustomize pinned"
    );

    let last = stages.last().unwrap();
    assert!(
        last.name.is_none()
            || !stages
                .iter()
                .any(|s| s.from == *last.name.as_ref().unwrap())
    );
    let user = last
        .instructions
        .iter()
        .rev()
        .find(|(k, _)| k == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric user");
    assert_ne!(uid, 0);
    // The deployment runs as the same user the image declares.
    let pod = deployment_pod(&base());
    assert_eq!(pod["securityContext"]["runAsUser"], json!(uid));

    // What the final stage holds.
    let files: Vec<String> = last
        .instructions
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, a)| a.split_whitespace().last().unwrap().to_string())
        .collect();
    for (_, a) in last.instructions.iter().filter(|(k, _)| k == "COPY") {
        let from = a
            .split_whitespace()
            .find_map(|w| w.strip_prefix("--from="))
            .expect("copied from a stage");
        assert!(
            stages.iter().any(|s| s.name.as_deref() == Some(from)),
            "stage {from}"
        );
    }
    let entry = last
        .instructions
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, a)| a.clone())
        .unwrap();
    let entry: Vec<String> = serde_json::from_str(&entry).expect("exec-form ENTRYPOINT");
    assert!(
        files.contains(&entry[0]),
        "the entrypoint {} is in the image",
        entry[0]
    );
    // The one program the binary execs is the kustomize build (src/flux/render/build.rs); the
    // image sets its command, and that program must be in the image.
    let env: BTreeMap<String, String> = last
        .instructions
        .iter()
        .filter(|(k, _)| k == "ENV")
        .flat_map(|(_, a)| env_pairs(a))
        .collect();
    let command = env
        .get("FLUX_CONVERGER_KUSTOMIZE")
        .expect("the image sets its renderer");
    let parsed = flux_converger::flux::render::KustomizeCommand::parse(command).unwrap();
    assert!(
        files.contains(&parsed.program),
        "{} is in the final stage ({files:?})",
        parsed.program
    );
    assert!(
        parsed
            .args
            .iter()
            .any(|a| a == "--load-restrictor=LoadRestrictionsNone"),
        "Flux's load restrictions"
    );
    assert_eq!(
        spawn_sites(),
        ["src/flux/render/build.rs"],
        "a new exec in src/ needs its program in the image"
    );
}

/// Files under src/ that start a process.
fn spawn_sites() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                if text.contains("Command::new") {
                    let rel = p
                        .strip_prefix(repo(""))
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    out.push(rel);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo("src"), &mut out);
    out.sort();
    out
}

// ---- the Argo CD component (manifests/argocd) ----

/// The install with `components`, from an overlay outside manifests/ as an operator writes it
/// (kustomize refuses a base that contains the kustomization using it).
fn install_with(components: &[&str]) -> Vec<Value> {
    let overlay = tempfile::Builder::new()
        .prefix(".manifests-overlay-")
        .tempdir_in(repo(""))
        .unwrap();
    let mut text = String::from("resources:\n  - ../manifests\ncomponents:\n");
    for c in components {
        text.push_str(&format!("  - ../manifests/{c}\n"));
    }
    std::fs::write(overlay.path().join("kustomization.yaml"), text).unwrap();
    kustomize(overlay.path())
}

fn yaml_file(rel: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo(rel)).unwrap())
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `kind/name` of each object.
fn names(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// The webhook body the shipped notification template posts for an Application: the template's
/// three `{{.app.metadata.<field> | toJson}}` actions replaced as Go's text/template with
/// Sprig's `toJson` writes a string (JSON-quoted). Any other action in the template fails here.
pub(crate) fn notification_body(namespace: &str, name: &str, uid: &str) -> String {
    let cm = yaml_file("manifests/argocd/argocd-notifications-cm.yaml");
    let template: Value =
        serde_saphyr::from_str(cm["data"]["template.flux-converger"].as_str().unwrap()).unwrap();
    let mut body = template["webhook"]["flux-converger"]["body"]
        .as_str()
        .unwrap()
        .to_string();
    for (field, value) in [("namespace", namespace), ("name", name), ("uid", uid)] {
        body = body.replace(
            &format!("{{{{.app.metadata.{field} | toJson}}}}"),
            &serde_json::to_string(value).unwrap(),
        );
    }
    assert!(!body.contains("{{"), "an action left in {body}");
    body
}

/// The component adds exactly its RBAC (applications get/list/watch/update/patch and
/// appprojects get/list/watch, cluster-wide; `argocd-cm` is read with the install's own `get
/// configmaps`) bound to the install's service account, and changes nothing else but the Deployment (the `--argocd-*`
/// flags, the token Secret mounted as the HMAC key is) and the NetworkPolicy (Argo CD's
/// notifications in, its API server out). The token Secret and the notifications snippet are
/// shapes to copy, never applied.
#[test]
fn argocd_component_grants_the_argocd_lane_and_wires_its_flags() {
    let base = base();
    let objects = install_with(&["argocd"]);
    let added: BTreeSet<String> = names(&objects).difference(&names(&base)).cloned().collect();
    assert_eq!(
        added,
        [
            "ClusterRole/flux-converger-argocd",
            "ClusterRoleBinding/flux-converger-argocd",
        ]
        .map(String::from)
        .into()
    );
    for o in &base {
        if !matches!(o["kind"].as_str(), Some("Deployment" | "NetworkPolicy")) {
            let name = o["metadata"]["name"].as_str().unwrap();
            assert_eq!(find(&objects, o["kind"].as_str().unwrap(), name), o);
        }
    }
    let rules = |kind: &str, name: &str| find(&objects, kind, name)["rules"].clone();
    assert_eq!(
        rules("ClusterRole", "flux-converger-argocd"),
        json!([
            {"apiGroups": ["argoproj.io"], "resources": ["applications"],
             "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["argoproj.io"], "resources": ["appprojects"],
             "verbs": ["get", "list", "watch"]},
        ])
    );
    let b = find(&objects, "ClusterRoleBinding", "flux-converger-argocd");
    assert_eq!(
        b["subjects"],
        json!([{"kind": "ServiceAccount", "name": "flux-converger", "namespace": "flux-system"}])
    );
    assert_eq!(
        b["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "flux-converger-argocd"})
    );
    // `argocd-cm` is read with the install's own cluster-wide `get configmaps`.
    assert!(
        rules("ClusterRole", "flux-converger")
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiGroups"] == json!([""])
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .contains(&json!("configmaps"))
                && r["verbs"].as_array().unwrap().contains(&json!("get"))
                && r["resourceNames"].is_null())
    );

    // The Deployment: hardened still (every flag one `serve` takes), the install's args kept,
    // the token files on the mounted Secret whose keys secret.yaml shows.
    let pod = deployment_pod(&objects);
    let c = container(&pod, "manager");
    assert_eq!(hardening_problems(&pod, c), Vec::<String>::new());
    let args = args_of(c);
    let base_args = args_of(container(&deployment_pod(&base), "manager"));
    assert_eq!(args[..base_args.len()], base_args[..]);
    assert_eq!(
        args[base_args.len()..],
        [
            "--argocd-server=https://argocd-server.argocd.svc",
            "--argocd-token-file=/etc/flux-converger/argocd/token",
            "--argocd-hook-token-file=/etc/flux-converger/argocd/hook-token",
            "--argocd-namespaces=argocd",
        ]
    );
    let secret = yaml_file("manifests/argocd/secret.yaml");
    assert_eq!(secret["metadata"]["namespace"], "flux-system");
    let keys: BTreeSet<&str> = secret["stringData"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["hook-token", "token"].into());
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "argocd")
        .expect("the Argo CD Secret mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "argocd")
        .unwrap();
    assert_eq!(
        volume["secret"],
        json!({"secretName": secret["metadata"]["name"], "defaultMode": 0o440})
    );
    for (flag, key) in [
        ("--argocd-token-file", "token"),
        ("--argocd-hook-token-file", "hook-token"),
    ] {
        assert_eq!(
            flag_value(c, flag),
            Some(format!("{}/{key}", mount["mountPath"].as_str().unwrap()))
        );
    }

    // The NetworkPolicy: the install's rules kept, Argo CD's notifications controller may post
    // to `http` (/hook/argocd), the service may reach argocd-server's pods (8080, behind its
    // Service's 443).
    let np = &find(&objects, "NetworkPolicy", "flux-converger")["spec"];
    let base_np = &find(&base, "NetworkPolicy", "flux-converger")["spec"];
    let argocd_pods = |app: &str| {
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "argocd"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": app}}}])
    };
    for (direction, peer, app, port) in [
        (
            "ingress",
            "from",
            "argocd-notifications-controller",
            json!("http"),
        ),
        ("egress", "to", "argocd-server", json!(8080)),
    ] {
        let rules = np[direction].as_array().unwrap();
        let base_rules = base_np[direction].as_array().unwrap();
        assert_eq!(rules[..base_rules.len()], base_rules[..], "{direction}");
        assert_eq!(
            rules[base_rules.len()..],
            [json!({peer: argocd_pods(app), "ports": [{"port": port, "protocol": "TCP"}]})],
            "{direction}"
        );
    }
}

/// The notifications snippet (argocd-notifications-cm.yaml) is the one docs/argocd.md shows,
/// posts to /hook/argocd on the install's Service with the hook token, names the Application
/// in a body `/hook/argocd` reads, and triggers on both failure shapes.
#[test]
fn argocd_notifications_snippet_reaches_the_hook_and_matches_the_docs() {
    let cm = yaml_file("manifests/argocd/argocd-notifications-cm.yaml");
    assert_eq!(cm["metadata"]["name"], "argocd-notifications-cm");
    assert_eq!(cm["metadata"]["namespace"], "argocd");
    // docs/argocd.md shows the same keys, the same text.
    let docs = std::fs::read_to_string(repo("docs/argocd.md")).unwrap();
    let snippet = docs
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("\n```").next())
        .find(|block| block.contains("service.webhook.flux-converger"))
        .expect("docs/argocd.md shows the notifications snippet");
    let shown: Value = serde_saphyr::from_str(snippet).unwrap();
    assert_eq!(
        shown, cm["data"],
        "docs/argocd.md and the shipped snippet differ"
    );

    let service: Value = serde_saphyr::from_str(
        cm["data"]["service.webhook.flux-converger"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let base = base();
    let svc = find(&base, "Service", "flux-converger");
    let http_port = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["targetPort"] == "http")
        .unwrap()["port"]
        .clone();
    assert_eq!(
        http_port, 80,
        "the URL names no port: the Service's 80 leads to `http`"
    );
    assert_eq!(service["url"], "http://flux-converger.flux-system.svc");
    assert_eq!(
        service["headers"],
        json!([{"name": "Content-Type", "value": "application/json"},
               {"name": "Authorization", "value": "Bearer $flux-converger-token"}])
    );
    let template: Value =
        serde_saphyr::from_str(cm["data"]["template.flux-converger"].as_str().unwrap()).unwrap();
    let webhook = &template["webhook"]["flux-converger"];
    assert_eq!(webhook["method"], "POST");
    assert_eq!(webhook["path"], "/hook/argocd");
    let body: Value =
        serde_json::from_str(&notification_body("argocd", "db \"x\"", "0b6f3c2a")).unwrap();
    assert_eq!(
        body,
        json!({"kind": "Application", "namespace": "argocd", "name": "db \"x\"", "uid": "0b6f3c2a"})
    );
    let triggers: Value =
        serde_saphyr::from_str(cm["data"]["trigger.on-sts-immutable"].as_str().unwrap()).unwrap();
    let triggers = triggers.as_array().unwrap();
    assert_eq!(triggers.len(), 2, "one per failure shape");
    let immutable = "'updates to statefulset spec for fields other than'";
    for (t, within, once_per) in [
        (
            &triggers[0],
            "app.status.operationState.phase in ['Error', 'Failed']",
            "app.status.operationState.startedAt",
        ),
        (
            &triggers[1],
            ".type == 'ComparisonError'",
            "app.status.sync.revision",
        ),
    ] {
        let when = t["when"].as_str().unwrap();
        assert!(when.contains(within) && when.contains(immutable), "{when}");
        assert_eq!(t["oncePer"], once_per);
        assert_eq!(t["send"], json!(["flux-converger"]));
    }
    let subscriptions: Value =
        serde_saphyr::from_str(cm["data"]["subscriptions"].as_str().unwrap()).unwrap();
    assert_eq!(
        subscriptions,
        json!([{"recipients": ["flux-converger"], "triggers": ["on-sts-immutable"]}])
    );
}

/// The other placement (manifests/examples/argocd-namespace): every namespaced object in
/// `argocd`, every binding granting to the service account there, nothing else changed.
#[test]
fn argocd_namespace_component_moves_the_install_into_argocd() {
    let beside_flux = install_with(&["argocd"]);
    let objects = install_with(&["argocd", "examples/argocd-namespace"]);
    assert_eq!(names(&objects), names(&beside_flux));
    for o in &objects {
        let kind = o["kind"].as_str().unwrap();
        let cluster_scoped = matches!(kind, "ClusterRole" | "ClusterRoleBinding");
        assert_eq!(
            o["metadata"]["namespace"].as_str(),
            (!cluster_scoped).then_some("argocd"),
            "{kind} {}",
            o["metadata"]["name"]
        );
        if kind.ends_with("Binding") {
            assert_eq!(
                o["subjects"],
                json!([{"kind": "ServiceAccount", "name": "flux-converger", "namespace": "argocd"}])
            );
        }
        let mut moved = o.clone();
        let mut before = find(&beside_flux, kind, o["metadata"]["name"].as_str().unwrap()).clone();
        for v in [&mut moved, &mut before] {
            if !cluster_scoped {
                v["metadata"]["namespace"] = json!("-");
            }
            if kind.ends_with("Binding") {
                v["subjects"][0]["namespace"] = json!("-");
            }
        }
        assert_eq!(moved, before, "{kind}: only its namespace moved");
    }
}
