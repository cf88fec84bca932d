//! The git history the demo publishes: one StatefulSet whose volume grows, then shrinks.
//! Pure data, so what the walk expects at each revision is written next to what it publishes.

/// The namespace Flux and the converger live in.
pub const FLUX_NS: &str = "flux-system";
pub const SOURCE: &str = "demo";
pub const KUSTOMIZATION: &str = "apps";
/// Where the StatefulSet runs.
pub const APP_NS: &str = "default";
pub const STATEFULSET: &str = "web";
pub const TEMPLATE: &str = "data";
pub const REPLICAS: usize = 3;
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
}

pub struct Revision {
    pub message: &'static str,
    pub size: &'static str,
    pub expect: Expect,
}

pub const HISTORY: [Revision; 3] = [
    Revision {
        message: "web: 3 replicas with a 1Gi data volume",
        size: "1Gi",
        expect: Expect::Applied,
    },
    Revision {
        message: "web: grow the data volume to 2Gi",
        size: "2Gi",
        expect: Expect::Grown,
    },
    Revision {
        message: "web: shrink the data volume back to 1Gi",
        size: "1Gi",
        expect: Expect::Refused,
    },
];

/// The repository tree at a revision: `apps/` with the StatefulSet and its page, no
/// kustomization.yaml (kustomize-controller generates one, as for most Flux repos).
pub fn tree(size: &str) -> Vec<(&'static str, String)> {
    vec![
        ("apps/web/page.yaml", PAGE.to_string()),
        ("apps/web/statefulset.yaml", statefulset(size)),
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

fn statefulset(size: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {STATEFULSET}
  namespace: {APP_NS}
spec:
  serviceName: web
  replicas: {REPLICAS}
  podManagementPolicy: Parallel
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        volumeMounts:
        - {{name: {TEMPLATE}, mountPath: /usr/share/nginx/html}}
        - {{name: page, mountPath: /etc/page}}
      volumes:
      - {{name: page, configMap: {{name: web-page}}}}
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
pub fn claims() -> Vec<String> {
    (0..REPLICAS)
        .map(|i| format!("{TEMPLATE}-{STATEFULSET}-{i}"))
        .collect()
}
