//! The git history the demo publishes: two StatefulSets whose volumes grow, are refused a
//! shrink, grow past what the driver allows and are recovered by a revert, each deployed by
//! its own Kustomization behind its own gate. Pure data, so what the walk expects
//! at each revision is written next to what it publishes.

/// The namespace Flux and the converger live in.
pub const FLUX_NS: &str = "flux-system";
pub const SOURCE: &str = "demo";
pub const KUSTOMIZATION: &str = "apps";
/// The Kustomization behind the artifact gate, and the ExternalArtifact it reads.
pub const ARTIFACT_KUSTOMIZATION: &str = "cache";
pub const EXTERNAL_ARTIFACT: &str = "cache";
/// Where the StatefulSets run.
pub const APP_NS: &str = "default";
pub const TEMPLATE: &str = "data";

/// One StatefulSet of the repository and the Kustomization that deploys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    pub statefulset: &'static str,
    pub replicas: usize,
    pub kustomization: &'static str,
    /// The Kustomization's `spec.path`.
    pub path: &'static str,
}

/// `web`, under `./apps`, deployed by `apps` (gate `suspend`, or `--gate`).
pub const WEB: Workload = Workload {
    statefulset: "web",
    replicas: 3,
    kustomization: KUSTOMIZATION,
    path: "./apps",
};

/// `cache`, under `./cache`, deployed by `cache` (gate `artifact`, through the ExternalArtifact
/// `cache` whose upstream is the same GitRepository).
pub const CACHE: Workload = Workload {
    statefulset: "cache",
    replicas: 2,
    kustomization: ARTIFACT_KUSTOMIZATION,
    path: "./cache",
};
/// The webhook key (the `token` of notification-controller's Provider secret).
pub const HMAC_KEY: &[u8] = b"demo-webhook-key";

/// What a revision should lead to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing to converge: Flux applies it as it is.
    Applied,
    /// Claims grown, StatefulSet re-created with its pods kept, then applied by Flux.
    Grown,
    /// Refused (a shrink): not handed off, nothing written.
    Refused,
    /// Grown as `Grown`, then the driver refuses the size for good: the claims are `infeasible`.
    Infeasible,
    /// A size declared back down after the failed expansion: converged as a recovery (the
    /// claims' requests lowered, the StatefulSet re-created), then the claims grow to it.
    Recovered,
}

/// The most the demo's CSI driver grows a volume to: a request above it is refused for good
/// (`ControllerResizeInfeasible`), as a volume type's maximum refuses it.
pub const DRIVER_MAX: &str = "64Gi";

pub struct Revision {
    pub message: &'static str,
    pub size: &'static str,
    pub expect: Expect,
}

pub const HISTORY: [Revision; 5] = [
    Revision {
        message: "web and cache: 3 and 2 replicas with a 1Gi data volume",
        size: "1Gi",
        expect: Expect::Applied,
    },
    Revision {
        message: "web and cache: grow the data volumes to 2Gi",
        size: "2Gi",
        expect: Expect::Grown,
    },
    Revision {
        message: "web and cache: shrink the data volumes back to 1Gi",
        size: "1Gi",
        expect: Expect::Refused,
    },
    Revision {
        message: "web and cache: grow the data volumes to 100Gi, more than the driver allows",
        size: "100Gi",
        expect: Expect::Infeasible,
    },
    Revision {
        message: "web and cache: revert to 10Gi, a size the driver takes",
        size: "10Gi",
        expect: Expect::Recovered,
    },
];

/// The repository tree at a revision: `apps/` with `web` and its page, `cache/` with `cache`,
/// both at `size`, no kustomization.yaml (kustomize-controller generates one, as for most Flux
/// repos).
pub fn tree(size: &str) -> Vec<(&'static str, String)> {
    vec![
        ("apps/web/page.yaml", PAGE.to_string()),
        ("apps/web/statefulset.yaml", statefulset(&WEB, size)),
        ("cache/statefulset.yaml", statefulset(&CACHE, size)),
        ("README.md", "# demo fleet repository\n".to_string()),
    ]
}

const PAGE: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: web-page
  namespace: default
data:
  index.html: <h1>served from a volume that grows without a restart</h1>
";

fn statefulset(w: &Workload, size: &str) -> String {
    let name = w.statefulset;
    let replicas = w.replicas;
    // `web` serves a page from a ConfigMap; `cache` is only its volume.
    let (page_mount, page_volume) = if name == WEB.statefulset {
        (
            "\n        - {name: page, mountPath: /etc/page}",
            "\n      volumes:\n      - {name: page, configMap: {name: web-page}}",
        )
    } else {
        ("", "")
    };
    format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  namespace: {APP_NS}
spec:
  serviceName: {name}
  replicas: {replicas}
  podManagementPolicy: Parallel
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        volumeMounts:
        - {{name: {TEMPLATE}, mountPath: /usr/share/nginx/html}}{page_mount}{page_volume}
  volumeClaimTemplates:
  - metadata: {{name: {TEMPLATE}}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: expandable
      resources: {{requests: {{storage: {size}}}}}
"
    )
}

/// `data-web-0`, `data-web-1`, ...
pub fn claims(w: &Workload) -> Vec<String> {
    (0..w.replicas)
        .map(|i| format!("{TEMPLATE}-{}-{i}", w.statefulset))
        .collect()
}
