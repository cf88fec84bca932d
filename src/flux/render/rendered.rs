//! What a render produces: the objects kustomize-controller would apply, and the StatefulSets
//! among them the converge needs.

use serde_json::Value;

/// A StatefulSet of the render, with the namespace it will be applied in.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedStatefulSet {
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

/// The objects kustomize-controller would apply, in kustomize's output order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    pub objects: Vec<Value>,
    pub statefulsets: Vec<RenderedStatefulSet>,
}
