//! Kubernetes' built-in kinds, checked against k8s-openapi's generated types: a document
//! must deserialize, and serializing it back must keep every field it had. A field the
//! type does not know is dropped on the way, which is how a typo shows.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::manifests;

/// Whether this is a built-in kind we can check.
pub fn knows(api_version: &str, kind: &str) -> bool {
    check_as(api_version, kind, &Value::Null).is_some()
}

pub fn validate(document: &Value) -> Result<(), Vec<String>> {
    let (api_version, kind) = manifests::type_of(document);
    check_as(&api_version, &kind, document)
        .unwrap_or_else(|| Err(vec![format!("no Kubernetes type for {api_version} {kind}")]))
}

fn check_as(api_version: &str, kind: &str, document: &Value) -> Option<Result<(), Vec<String>>> {
    let check = match (api_version, kind) {
        ("v1", "Service") => round_trip::<Service>,
        ("v1", "ConfigMap") => round_trip::<ConfigMap>,
        ("v1", "Secret") => round_trip::<Secret>,
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>,
        ("v1", "Namespace") => round_trip::<Namespace>,
        ("apps/v1", "Deployment") => round_trip::<Deployment>,
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => round_trip::<ClusterRoleBinding>,
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>,
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<NetworkPolicy>,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => round_trip::<CustomResourceDefinition>,
        _ => return None,
    };
    Some(if document.is_null() { Ok(()) } else { check(document) })
}

fn round_trip<T: DeserializeOwned + Serialize>(document: &Value) -> Result<(), Vec<String>> {
    let typed: T = serde_json::from_value(document.clone()).map_err(|e| vec![e.to_string()])?;
    let back = serde_json::to_value(&typed).map_err(|e| vec![e.to_string()])?;
    let mut lost = Vec::new();
    compare(document, &back, String::new(), &mut lost);
    if lost.is_empty() { Ok(()) } else { Err(lost) }
}

/// Records every path of `original` that `back` does not hold with the same value.
fn compare(original: &Value, back: &Value, path: String, lost: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(fields), Value::Object(kept)) => {
            for (name, value) in fields {
                let child = format!("{path}/{name}");
                match kept.get(name) {
                    Some(kept) => compare(value, kept, child, lost),
                    None if is_empty(value) => {}
                    None => lost.push(format!("{child}: not a field of this kind")),
                }
            }
        }
        (Value::Array(items), Value::Array(kept)) if items.len() == kept.len() => {
            for (index, (item, kept)) in items.iter().zip(kept).enumerate() {
                compare(item, kept, format!("{path}/{index}"), lost);
            }
        }
        (a, b) if a == b => {}
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) => lost.push(format!("{path}: {a} became {b}")),
    }
}

/// Empty maps and lists are omitted when serialized, and mean the same.
fn is_empty(value: &Value) -> bool {
    matches!(value, Value::Null)
        || value.as_object().is_some_and(|o| o.is_empty())
        || value.as_array().is_some_and(|a| a.is_empty())
}
