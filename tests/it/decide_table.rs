//! The decision table: every case is built from the objects captured from a real API server
//! (`tests/fixtures/v1.28`, `v1.32`), changed in one place, so the table exercises the shapes the
//! converger really meets (server defaults on live templates, claim status, classes).

use flux_converger::decide::{Plan, RefusalCode, decide, is_claim_of};
use flux_converger::manifest::parse_documents;
use serde_json::{Value, json};

fn fixture(path: &str) -> Vec<Value> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    parse_documents(&full, &text)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|d| d.object)
        .collect()
}

fn one(path: &str) -> Value {
    fixture(path).remove(0)
}

/// Sets `value` at JSON pointer `ptr`, creating maps on the way.
fn set(mut v: Value, ptr: &str, value: Value) -> Value {
    let mut cur = &mut v;
    for seg in ptr.trim_start_matches('/').split('/') {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Array(a) => &mut a[seg.parse::<usize>().expect("array index")],
            other => {
                if !other.is_object() {
                    *other = json!({});
                }
                other
                    .as_object_mut()
                    .expect("object")
                    .entry(seg)
                    .or_insert(Value::Null)
            }
        };
    }
    *cur = value;
    v
}

fn unset(mut v: Value, ptr: &str) -> Value {
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    if let Some(Value::Object(m)) = v.pointer_mut(parent) {
        m.remove(&key.replace("~1", "/"));
    }
    v
}

const STORAGE: &str = "/spec/volumeClaimTemplates/0/spec/resources/requests/storage";

/// What git declares: the captured desired StatefulSet `web` with its `data` template at `size`.
fn desired(size: &str) -> Value {
    set(
        one("v1.28/desired-statefulset-1Gi.yaml"),
        STORAGE,
        json!(size),
    )
}

/// The live `web` as the server returns it (with every default), its template at `size`.
fn live(size: &str) -> Value {
    set(one("v1.28/live-statefulset.yaml"), STORAGE, json!(size))
}

/// A Bound claim like the captured one, renamed, resized and put in `class`.
fn bound(name: &str, size: &str) -> Value {
    let c = one("v1.28/pvc-bound.yaml");
    let c = set(c, "/metadata/name", json!(name));
    let c = set(c, "/spec/resources/requests/storage", json!(size));
    set(c, "/status/capacity/storage", json!(size))
}

fn pending(name: &str, size: &str) -> Value {
    let c = one("v1.28/pvc-pending.yaml");
    let c = set(c, "/metadata/name", json!(name));
    set(c, "/spec/resources/requests/storage", json!(size))
}

fn in_class(c: Value, class: &str) -> Value {
    set(c, "/spec/storageClassName", json!(class))
}

/// A second template `logs` next to `data`, on a desired or live object.
fn with_logs(sts: Value, size: &str) -> Value {
    let mut t = sts
        .pointer("/spec/volumeClaimTemplates/0")
        .cloned()
        .expect("template");
    t = set(t, "/metadata/name", json!("logs"));
    t = set(t, "/spec/resources/requests/storage", json!(size));
    let mut sts = sts;
    sts.pointer_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
        .expect("templates")
        .push(t);
    sts
}

enum Expect {
    Plan {
        recreate: bool,
        /// (template, from, to) as spelled
        grown: Vec<(&'static str, &'static str, &'static str)>,
        /// (claim, class, from, to) as spelled, in plan order
        resize: Vec<(&'static str, &'static str, &'static str, &'static str)>,
        deferred: Vec<&'static str>,
    },
    /// The code and words the message must contain.
    Refused(RefusalCode, Vec<&'static str>),
    /// A re-create carrying these change classes (in plan order); `words` must appear in the
    /// plan's JSON (fields, both values, notes); `resize` the claims grown.
    Changes {
        classes: Vec<&'static str>,
        words: Vec<&'static str>,
        resize: Vec<&'static str>,
    },
}

struct Case {
    name: &'static str,
    desired: Value,
    live: Option<Value>,
    claims: Vec<Value>,
    classes: Option<Vec<Value>>,
    expect: Expect,
}

fn case(
    name: &'static str,
    desired: Value,
    live: Option<Value>,
    claims: Vec<Value>,
    expect: Expect,
) -> Case {
    Case {
        name,
        desired,
        live,
        claims,
        classes: None,
        expect,
    }
}

fn nothing() -> Expect {
    Expect::Plan {
        recreate: false,
        grown: vec![],
        resize: vec![],
        deferred: vec![],
    }
}

fn grow_1_to_2(resize: Vec<&'static str>, deferred: Vec<&'static str>) -> Expect {
    Expect::Plan {
        recreate: true,
        grown: vec![("data", "1Gi", "2Gi")],
        resize: resize
            .into_iter()
            .map(|c| (c, "expandable", "1Gi", "2Gi"))
            .collect(),
        deferred,
    }
}

fn changes(classes: &[&'static str], words: &[&'static str]) -> Expect {
    Expect::Changes {
        classes: classes.to_vec(),
        words: words.to_vec(),
        resize: vec![],
    }
}

fn refused(code: RefusalCode, words: &[&'static str]) -> Expect {
    Expect::Refused(code, words.to_vec())
}

fn cases() -> Vec<Case> {
    use RefusalCode::*;
    let three_bound = || {
        vec![
            bound("data-web-0", "1Gi"),
            bound("data-web-1", "1Gi"),
            bound("data-web-2", "1Gi"),
        ]
    };
    let v132_live = set(one("v1.32/live-statefulset.yaml"), STORAGE, json!("1Gi"));
    vec![
        // --- no change, spellings, live absent
        case(
            "unchanged",
            desired("1Gi"),
            Some(live("1Gi")),
            three_bound(),
            nothing(),
        ),
        case("live absent", desired("2Gi"), None, vec![], nothing()),
        case(
            "live absent ignores small claims",
            desired("2Gi"),
            None,
            three_bound(),
            nothing(),
        ),
        case(
            "1024Mi equals live 1Gi",
            desired("1024Mi"),
            Some(live("1Gi")),
            three_bound(),
            nothing(),
        ),
        case(
            "bytes equal live 2Gi",
            desired("2147483648"),
            Some(live("2Gi")),
            vec![bound("data-web-0", "2Gi")],
            nothing(),
        ),
        case(
            "2048Mi equals live 2Gi, claims 2Gi",
            desired("2048Mi"),
            Some(live("2Gi")),
            vec![bound("data-web-0", "2Gi")],
            nothing(),
        ),
        case(
            "1.073741824G equals 1Gi",
            desired("1.073741824G"),
            Some(live("1Gi")),
            vec![],
            nothing(),
        ),
        // --- growth
        case(
            "the fixture's growth",
            desired("2Gi"),
            Some(live("1Gi")),
            three_bound(),
            grow_1_to_2(vec!["data-web-0", "data-web-1", "data-web-2"], vec![]),
        ),
        case(
            "growth on the v1.32 live object",
            desired("2Gi"),
            Some(v132_live),
            three_bound(),
            grow_1_to_2(vec!["data-web-0", "data-web-1", "data-web-2"], vec![]),
        ),
        case(
            "growth with no claims (replicas 0)",
            set(desired("2Gi"), "/spec/replicas", json!(0)),
            Some(live("1Gi")),
            vec![],
            grow_1_to_2(vec![], vec![]),
        ),
        case(
            "1.5Gi keeps its spelling",
            desired("1.5Gi"),
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi")],
            Expect::Plan {
                recreate: true,
                grown: vec![("data", "1Gi", "1.5Gi")],
                resize: vec![("data-web-0", "expandable", "1Gi", "1.5Gi")],
                deferred: vec![],
            },
        ),
        case(
            "1Gi grows to 1.1G (1G < 1Gi < 1.1G)",
            desired("1.1G"),
            Some(live("1Gi")),
            vec![],
            Expect::Plan {
                recreate: true,
                grown: vec![("data", "1Gi", "1.1G")],
                resize: vec![],
                deferred: vec![],
            },
        ),
        case(
            "scaled-away ordinals grow too",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                bound("data-web-4", "1Gi"),
                bound("data-web-0", "1Gi"),
                bound("data-web-3", "1Gi"),
                bound("data-web-1", "1Gi"),
                bound("data-web-2", "1Gi"),
            ],
            grow_1_to_2(
                vec![
                    "data-web-0",
                    "data-web-1",
                    "data-web-2",
                    "data-web-3",
                    "data-web-4",
                ],
                vec![],
            ),
        ),
        case(
            "claim-name order, not numeric",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                bound("data-web-2", "1Gi"),
                bound("data-web-10", "1Gi"),
                bound("data-web-1", "1Gi"),
            ],
            grow_1_to_2(vec!["data-web-1", "data-web-10", "data-web-2"], vec![]),
        ),
        case(
            "pending claim is deferred",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi"), pending("data-web-1", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec!["data-web-1"]),
        ),
        case(
            "claim without status is deferred",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![unset(bound("data-web-0", "1Gi"), "/status")],
            grow_1_to_2(vec![], vec!["data-web-0"]),
        ),
        case(
            "claim already larger is left alone",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![bound("data-web-0", "5Gi"), bound("data-web-1", "1Gi")],
            grow_1_to_2(vec!["data-web-1"], vec![]),
        ),
        case(
            "claim equal by value is left alone",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                bound("data-web-0", "2048Mi"),
                bound("data-web-1", "2147483648"),
            ],
            grow_1_to_2(vec![], vec![]),
        ),
        case(
            "claim larger than live template but smaller than desired grows",
            desired("3Gi"),
            Some(live("1Gi")),
            vec![bound("data-web-0", "2Gi")],
            Expect::Plan {
                recreate: true,
                grown: vec![("data", "1Gi", "3Gi")],
                resize: vec![("data-web-0", "expandable", "2Gi", "3Gi")],
                deferred: vec![],
            },
        ),
        case(
            "lagging claim healed without recreate",
            desired("2Gi"),
            Some(live("2Gi")),
            vec![bound("data-web-0", "1Gi"), bound("data-web-1", "2Gi")],
            Expect::Plan {
                recreate: false,
                grown: vec![],
                resize: vec![("data-web-0", "expandable", "1Gi", "2Gi")],
                deferred: vec![],
            },
        ),
        case(
            "lagging pending claim only deferred",
            desired("2Gi"),
            Some(live("2Gi")),
            vec![pending("data-web-0", "1Gi")],
            Expect::Plan {
                recreate: false,
                grown: vec![],
                resize: vec![],
                deferred: vec!["data-web-0"],
            },
        ),
        // --- which claims belong to the StatefulSet
        case(
            "claims of other namespaces are ignored",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                set(
                    bound("data-web-0", "1Gi"),
                    "/metadata/namespace",
                    json!("other"),
                ),
                bound("data-web-1", "1Gi"),
            ],
            grow_1_to_2(vec!["data-web-1"], vec![]),
        ),
        case(
            "names that only share a prefix are not claims",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                bound("data-web-1-0", "1Gi"),
                bound("data-webx-0", "1Gi"),
                bound("data-web-0a", "1Gi"),
                bound("data-web-", "1Gi"),
                bound("logs-web-0", "1Gi"),
                bound("data-web-+1", "1Gi"),
                bound("data-web-2", "1Gi"),
            ],
            grow_1_to_2(vec!["data-web-2"], vec![]),
        ),
        case(
            "a StatefulSet whose name extends another's",
            set(desired("2Gi"), "/metadata/name", json!("web-1")),
            Some(set(live("1Gi"), "/metadata/name", json!("web-1"))),
            vec![
                bound("data-web-1-0", "1Gi"),
                bound("data-web-0", "1Gi"),
                bound("data-web-1", "1Gi"),
            ],
            grow_1_to_2(vec!["data-web-1-0"], vec![]),
        ),
        // --- classes
        case(
            "class from the legacy annotation",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![set(
                unset(bound("data-web-0", "1Gi"), "/spec/storageClassName"),
                "/metadata/annotations/volume.beta.kubernetes.io~1storage-class",
                json!("expandable"),
            )],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "legacy annotation naming a fixed class",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![set(
                unset(bound("data-web-0", "1Gi"), "/spec/storageClassName"),
                "/metadata/annotations/volume.beta.kubernetes.io~1storage-class",
                json!("fixed"),
            )],
            refused(
                NotExpandable,
                &[
                    "\"data-web-0\"",
                    "\"fixed\"",
                    "1Gi",
                    "2Gi",
                    "allowVolumeExpansion",
                ],
            ),
        ),
        case(
            "class without allowVolumeExpansion",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![
                bound("data-web-0", "1Gi"),
                in_class(bound("data-web-1", "1Gi"), "fixed"),
            ],
            refused(
                NotExpandable,
                &[
                    "claim \"data-web-1\"",
                    "template \"data\"",
                    "storage class \"fixed\"",
                    "from 1Gi to 2Gi",
                ],
            ),
        ),
        case(
            "claim without class",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![unset(bound("data-web-0", "1Gi"), "/spec/storageClassName")],
            refused(NotExpandable, &["\"data-web-0\"", "no storage class"]),
        ),
        case(
            "claim with empty class",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![in_class(bound("data-web-0", "1Gi"), "")],
            refused(NotExpandable, &["\"data-web-0\"", "no storage class"]),
        ),
        case(
            "claim of an unknown class",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![in_class(bound("data-web-0", "1Gi"), "gone")],
            refused(
                NotExpandable,
                &["\"data-web-0\"", "\"gone\" does not exist"],
            ),
        ),
        Case {
            classes: Some(vec![]),
            ..case(
                "no classes at all",
                desired("2Gi"),
                Some(live("1Gi")),
                vec![bound("data-web-0", "1Gi")],
                refused(NotExpandable, &["\"expandable\" does not exist"]),
            )
        },
        case(
            "fixed class is fine when the claim is large enough",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![in_class(bound("data-web-0", "2Gi"), "fixed")],
            grow_1_to_2(vec![], vec![]),
        ),
        case(
            "fixed class pending claim is deferred, not refused",
            desired("2Gi"),
            Some(live("1Gi")),
            vec![in_class(pending("data-web-0", "1Gi"), "fixed")],
            grow_1_to_2(vec![], vec!["data-web-0"]),
        ),
        // --- shrink
        case(
            "shrink",
            desired("1Gi"),
            Some(live("2Gi")),
            vec![],
            refused(
                Shrink,
                &["template \"data\"", "2Gi (live)", "1Gi (desired)"],
            ),
        ),
        case(
            "1G is a shrink of 1Gi",
            desired("1G"),
            Some(live("1Gi")),
            vec![],
            refused(Shrink, &["\"data\"", "1Gi (live)", "1G (desired)"]),
        ),
        case(
            "1023Mi is a shrink of 1Gi",
            desired("1023Mi"),
            Some(live("1Gi")),
            vec![],
            refused(Shrink, &["1023Mi"]),
        ),
        // --- templates
        case(
            "class changed",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/storageClassName",
                json!("fixed"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                StorageClassChanged,
                &[
                    "template \"data\"",
                    "spec.storageClassName",
                    "\"expandable\"",
                    "\"fixed\"",
                ],
            ),
        ),
        case(
            "class removed",
            unset(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/spec/storageClassName",
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                StorageClassChanged,
                &["spec.storageClassName", "<unset>", "revert"],
            ),
        ),
        case(
            "access modes changed",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/accessModes",
                json!(["ReadWriteOnce", "ReadOnlyMany"]),
            ),
            Some(live("1Gi")),
            vec![],
            refused(AccessModesChanged, &["spec.accessModes", "ReadOnlyMany"]),
        ),
        case(
            "access mode replaced",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/spec/accessModes/0",
                json!("ReadWriteOncePod"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                AccessModesChanged,
                &[
                    "spec.accessModes[0]",
                    "\"ReadWriteOnce\"",
                    "\"ReadWriteOncePod\"",
                ],
            ),
        ),
        case(
            "volume mode Block",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/volumeMode",
                json!("Block"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                VolumeModeChanged,
                &["spec.volumeMode", "\"Filesystem\"", "\"Block\"", "revert"],
            ),
        ),
        case(
            "explicit volumeMode Filesystem equals the default",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/spec/volumeMode",
                json!("Filesystem"),
            ),
            Some(live("1Gi")),
            vec![],
            nothing(),
        ),
        case(
            "template selector added",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/selector/matchLabels/tier",
                json!("gold"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(OtherImmutable, &["spec.selector", "gold"]),
        ),
        case(
            "data source added",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/dataSource",
                json!({"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}),
            ),
            Some(live("1Gi")),
            vec![],
            refused(OtherImmutable, &["spec.dataSource", "snap"]),
        ),
        case(
            "data source mirrored by the server is equal",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/spec/dataSource",
                json!({"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}),
            ),
            Some(set(
                set(
                    live("1Gi"),
                    "/spec/volumeClaimTemplates/0/spec/dataSource",
                    json!({"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}),
                ),
                "/spec/volumeClaimTemplates/0/spec/dataSourceRef",
                json!({"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}),
            )),
            vec![],
            nothing(),
        ),
        case(
            "template labels added",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/metadata/labels/backup",
                json!("daily"),
            ),
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi")],
            Expect::Changes {
                classes: vec!["claim-metadata", "storage-grown"],
                words: vec![
                    "spec.volumeClaimTemplates[data].metadata.labels.backup",
                    "<unset>",
                    "daily",
                    "keep their old labels",
                ],
                resize: vec!["data-web-0"],
            },
        ),
        case(
            "template annotations changed",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/metadata/annotations/a",
                json!("2"),
            ),
            Some(set(
                live("1Gi"),
                "/spec/volumeClaimTemplates/0/metadata/annotations/a",
                json!("1"),
            )),
            vec![],
            changes(
                &["claim-metadata"],
                &["metadata.annotations.a", "\\\"1\\\"", "\\\"2\\\""],
            ),
        ),
        case(
            "storage limit added",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/resources/limits/storage",
                json!("4Gi"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                OtherImmutable,
                &["spec.resources.limits.storage", "\"4Gi\""],
            ),
        ),
        case(
            "storage limit equal by value",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/spec/resources/limits/storage",
                json!("4096Mi"),
            ),
            Some(set(
                live("1Gi"),
                "/spec/volumeClaimTemplates/0/spec/resources/limits/storage",
                json!("4Gi"),
            )),
            vec![bound("data-web-0", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "server fields written into the desired template are ignored",
            set(
                set(
                    set(
                        desired("1Gi"),
                        "/spec/volumeClaimTemplates/0/apiVersion",
                        json!("v1"),
                    ),
                    "/spec/volumeClaimTemplates/0/kind",
                    json!("PersistentVolumeClaim"),
                ),
                "/spec/volumeClaimTemplates/0/status/phase",
                json!("Pending"),
            ),
            Some(live("1Gi")),
            vec![],
            nothing(),
        ),
        case(
            "empty labels equal absent labels",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/metadata/labels",
                json!({}),
            ),
            Some(live("1Gi")),
            vec![],
            nothing(),
        ),
        case(
            "template added",
            with_logs(desired("1Gi"), "1Gi"),
            Some(live("1Gi")),
            vec![],
            changes(
                &["template-added"],
                &[
                    "spec.volumeClaimTemplates[logs]",
                    "1Gi",
                    "logs-web-N",
                    "roll",
                ],
            ),
        ),
        case(
            "template removed",
            desired("1Gi"),
            Some(with_logs(live("1Gi"), "1Gi")),
            vec![],
            refused(
                TemplateRemoved,
                &["template \"logs\" removed", "--cascade=orphan"],
            ),
        ),
        case(
            "template renamed",
            set(
                desired("2Gi"),
                "/spec/volumeClaimTemplates/0/metadata/name",
                json!("store"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(TemplateRemoved, &["template \"data\" renamed to \"store\""]),
        ),
        case(
            "templates reordered",
            {
                let d = with_logs(desired("1Gi"), "1Gi");
                let a = d
                    .pointer("/spec/volumeClaimTemplates")
                    .cloned()
                    .expect("templates");
                set(d, "/spec/volumeClaimTemplates", json!([a[1], a[0]]))
            },
            Some(with_logs(live("1Gi"), "1Gi")),
            vec![],
            refused(OtherImmutable, &["reordered"]),
        ),
        case(
            "two templates, one grows",
            with_logs(desired("2Gi"), "1Gi"),
            Some(with_logs(live("1Gi"), "1Gi")),
            vec![bound("data-web-0", "1Gi"), bound("logs-web-0", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "two templates, both grow",
            with_logs(desired("2Gi"), "500Mi"),
            Some(with_logs(live("1Gi"), "100Mi")),
            vec![
                bound("logs-web-1", "100Mi"),
                bound("data-web-0", "1Gi"),
                bound("logs-web-0", "100Mi"),
                pending("logs-web-2", "100Mi"),
            ],
            Expect::Plan {
                recreate: true,
                grown: vec![("data", "1Gi", "2Gi"), ("logs", "100Mi", "500Mi")],
                resize: vec![
                    ("data-web-0", "expandable", "1Gi", "2Gi"),
                    ("logs-web-0", "expandable", "100Mi", "500Mi"),
                    ("logs-web-1", "expandable", "100Mi", "500Mi"),
                ],
                deferred: vec!["logs-web-2"],
            },
        ),
        case(
            "second template shrinks",
            with_logs(desired("2Gi"), "50Mi"),
            Some(with_logs(live("1Gi"), "100Mi")),
            vec![],
            refused(
                Shrink,
                &["template \"logs\"", "100Mi (live)", "50Mi (desired)"],
            ),
        ),
        // --- other immutable fields
        case(
            "serviceName changed",
            set(desired("2Gi"), "/spec/serviceName", json!("web-headless")),
            Some(live("1Gi")),
            vec![],
            refused(
                ServiceNameChanged,
                &[
                    "spec.serviceName",
                    "\"web\"",
                    "\"web-headless\"",
                    "DNS subdomain",
                ],
            ),
        ),
        case(
            "podManagementPolicy changed",
            set(
                desired("1Gi"),
                "/spec/podManagementPolicy",
                json!("OrderedReady"),
            ),
            Some(live("1Gi")),
            vec![],
            changes(
                &["pod-management-policy"],
                &[
                    "spec.podManagementPolicy",
                    "\\\"Parallel\\\"",
                    "\\\"OrderedReady\\\"",
                ],
            ),
        ),
        case(
            "podManagementPolicy left to its default over a live Parallel",
            unset(desired("1Gi"), "/spec/podManagementPolicy"),
            Some(live("1Gi")),
            vec![],
            changes(&["pod-management-policy"], &["spec.podManagementPolicy"]),
        ),
        case(
            "podManagementPolicy default equals live OrderedReady",
            unset(desired("2Gi"), "/spec/podManagementPolicy"),
            Some(set(
                live("1Gi"),
                "/spec/podManagementPolicy",
                json!("OrderedReady"),
            )),
            vec![bound("data-web-0", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "selector changed",
            set(
                desired("2Gi"),
                "/spec/selector/matchLabels/app",
                json!("db"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(
                SelectorChanged,
                &[
                    "spec.selector.matchLabels.app",
                    "\"web\"",
                    "\"db\"",
                    "not be adopted",
                ],
            ),
        ),
        case(
            "empty matchExpressions equal absent",
            set(desired("1Gi"), "/spec/selector/matchExpressions", json!([])),
            Some(live("1Gi")),
            vec![],
            nothing(),
        ),
        case(
            "revisionHistoryLimit changed",
            set(desired("1Gi"), "/spec/revisionHistoryLimit", json!(5)),
            Some(live("1Gi")),
            vec![],
            changes(
                &["revision-history-limit"],
                &["spec.revisionHistoryLimit", "10", "5", "1.33"],
            ),
        ),
        case(
            "mutable fields may change with a growth",
            {
                let d = set(desired("2Gi"), "/spec/replicas", json!(5));
                let d = set(
                    d,
                    "/spec/template/spec/containers/0/image",
                    json!("busybox:1.37"),
                );
                let d = set(d, "/spec/updateStrategy", json!({"type": "OnDelete"}));
                let d = set(
                    d,
                    "/spec/persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Delete", "whenScaled": "Delete"}),
                );
                let d = set(d, "/spec/minReadySeconds", json!(10));
                set(d, "/spec/ordinals", json!({"start": 1}))
            },
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "serviceName is reported before a template change",
            set(
                set(desired("2Gi"), "/spec/serviceName", json!("x")),
                "/spec/volumeClaimTemplates/0/spec/storageClassName",
                json!("fixed"),
            ),
            Some(live("1Gi")),
            vec![],
            refused(ServiceNameChanged, &["spec.serviceName"]),
        ),
        case(
            "policy, claim labels, an added template and growth in one re-create",
            {
                let d = with_logs(desired("2Gi"), "500Mi");
                let d = set(d, "/spec/podManagementPolicy", json!("OrderedReady"));
                set(
                    d,
                    "/spec/volumeClaimTemplates/0/metadata/labels/helm.sh~1chart",
                    json!("db-1.2.3"),
                )
            },
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi"), bound("data-web-1", "1Gi")],
            Expect::Changes {
                classes: vec![
                    "pod-management-policy",
                    "claim-metadata",
                    "storage-grown",
                    "template-added",
                ],
                words: vec!["helm.sh/chart", "db-1.2.3", "500Mi", "OrderedReady"],
                resize: vec!["data-web-0", "data-web-1"],
            },
        ),
        case(
            "an added template next to a removed one is a removal",
            with_logs(
                set(
                    desired("1Gi"),
                    "/spec/volumeClaimTemplates/0/metadata/name",
                    json!("store"),
                ),
                "1Gi",
            ),
            Some(live("1Gi")),
            vec![],
            refused(TemplateRemoved, &["\"data\"", "removed"]),
        ),
        case(
            "an added template with a bad size is rejected",
            with_logs(desired("1Gi"), "lots"),
            Some(live("1Gi")),
            vec![],
            refused(Rejected, &["desired template \"logs\""]),
        ),
        case(
            "a shrink next to a label change is still a shrink",
            set(
                desired("1Gi"),
                "/spec/volumeClaimTemplates/0/metadata/labels/v",
                json!("2"),
            ),
            Some(live("2Gi")),
            vec![],
            refused(Shrink, &["2Gi (live)", "1Gi (desired)", "revert"]),
        ),
        // --- namespaces
        case(
            "desired without namespace takes the live one",
            unset(desired("2Gi"), "/metadata/namespace"),
            Some(live("1Gi")),
            vec![bound("data-web-0", "1Gi")],
            grow_1_to_2(vec!["data-web-0"], vec![]),
        ),
        case(
            "desired in another namespace sees only its claims",
            set(desired("2Gi"), "/metadata/namespace", json!("team")),
            Some(set(live("1Gi"), "/metadata/namespace", json!("team"))),
            vec![
                bound("data-web-0", "1Gi"),
                set(
                    bound("data-web-1", "1Gi"),
                    "/metadata/namespace",
                    json!("team"),
                ),
            ],
            grow_1_to_2(vec!["data-web-1"], vec![]),
        ),
    ]
}

fn run(c: &Case) -> Result<Plan, flux_converger::decide::Refusal> {
    let desired = serde_json::from_value(c.desired.clone())
        .unwrap_or_else(|e| panic!("{}: desired: {e}", c.name));
    let live = c
        .live
        .clone()
        .map(|l| serde_json::from_value(l).unwrap_or_else(|e| panic!("{}: live: {e}", c.name)));
    let claims: Vec<_> = c
        .claims
        .iter()
        .map(|v| {
            serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{}: claim: {e}", c.name))
        })
        .collect();
    let classes: Vec<_> = c
        .classes
        .clone()
        .unwrap_or_else(|| fixture("v1.28/storageclasses.yaml"))
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap_or_else(|e| panic!("{}: class: {e}", c.name)))
        .collect();
    decide(&desired, live.as_ref(), &claims, &classes)
}

#[test]
fn decide_table() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = run(c);
        let ok = match (&c.expect, &got) {
            (
                Expect::Plan {
                    recreate,
                    grown,
                    resize,
                    deferred,
                },
                Ok(p),
            ) => {
                let g: Vec<_> = p
                    .grown
                    .iter()
                    .map(|g| (g.template.as_str(), g.from.as_str(), g.to.as_str()))
                    .collect();
                let r: Vec<_> = p
                    .resize
                    .iter()
                    .map(|r| {
                        (
                            r.claim.as_str(),
                            r.storage_class.as_str(),
                            r.from.as_str(),
                            r.to.as_str(),
                        )
                    })
                    .collect();
                let d: Vec<_> = p.deferred.iter().map(|d| d.claim.as_str()).collect();
                let templates_ok = p
                    .resize
                    .iter()
                    .all(|r| r.claim.starts_with(&format!("{}-", r.template)));
                p.recreate == *recreate
                    && g == *grown
                    && r == *resize
                    && d == *deferred
                    && templates_ok
                    && p.name == c.desired["metadata"]["name"]
            }
            (
                Expect::Changes {
                    classes,
                    words,
                    resize,
                },
                Ok(p),
            ) => {
                let json = serde_json::to_string(&p.changes).expect("changes serialise");
                let got_classes: Vec<&str> = p.changes.iter().map(|c| c.class.as_str()).collect();
                let got_resize: Vec<&str> = p.resize.iter().map(|r| r.claim.as_str()).collect();
                p.recreate
                    && got_classes == *classes
                    && got_resize == *resize
                    && words.iter().all(|w| json.contains(w))
            }
            (Expect::Refused(code, words), Err(r)) => {
                r.code == *code && words.iter().all(|w| r.message.contains(w))
            }
            _ => false,
        };
        if !ok {
            failures.push(format!("{}: got {got:#?}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn plan_and_refusal_name_the_statefulset() {
    let c = case(
        "ns",
        unset(desired("2Gi"), "/metadata/namespace"),
        None,
        vec![],
        nothing(),
    );
    let p = run(&c).expect("plan");
    assert_eq!((p.namespace.as_str(), p.name.as_str()), ("default", "web"));
    let c = case(
        "r",
        set(desired("1Gi"), "/metadata/namespace", json!("team")),
        Some(set(live("2Gi"), "/metadata/namespace", json!("team"))),
        vec![],
        nothing(),
    );
    let r = run(&c).expect_err("refusal");
    assert_eq!(
        (r.namespace.as_str(), r.name.as_str(), r.code.as_str()),
        ("team", "web", "shrink")
    );
    assert!(
        r.to_string()
            .starts_with("team/web: shrink: template \"data\""),
        "{r}"
    );
}

#[test]
fn deferred_reason_quotes_the_api_server() {
    let c = case(
        "p",
        desired("2Gi"),
        Some(live("1Gi")),
        vec![pending("data-web-0", "1Gi")],
        nothing(),
    );
    let p = run(&c).expect("plan");
    let reason = &p.deferred[0].reason;
    assert!(reason.contains("Pending"), "{reason}");
    assert!(reason.contains("from 1Gi to 2Gi"), "{reason}");
    // The rule as the captured 422 states it.
    let body = std::fs::read_to_string(format!(
        "{}/tests/fixtures/v1.28/error-pvc-unbound-immutable.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    let rule = "spec is immutable after creation except resources.requests for bound claims";
    assert!(body.contains(rule) && reason.contains(rule), "{reason}");
}

#[test]
fn mutable_fields_are_the_servers_list() {
    let body = std::fs::read_to_string(format!(
        "{}/tests/fixtures/v1.28/error-statefulset-update-forbidden.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture");
    for f in flux_converger::decide::MUTABLE_SPEC_FIELDS {
        assert!(body.contains(&format!("'{f}'")), "{f}");
    }
}

#[test]
fn claim_names() {
    assert!(is_claim_of("data-web-0", "data", "web"));
    assert!(is_claim_of("data-web-12", "data", "web"));
    assert!(is_claim_of("data-web-1-0", "data", "web-1"));
    assert!(!is_claim_of("data-web-1-0", "data", "web"));
    assert!(!is_claim_of("data-web-", "data", "web"));
    assert!(!is_claim_of("data-web-x", "data", "web"));
    assert!(!is_claim_of("data-web0", "data", "web"));
    assert!(!is_claim_of("datas-web-0", "data", "web"));
}
