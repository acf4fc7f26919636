//! The agent's Kubernetes manifest and image, checked offline: the objects parse as the
//! Kubernetes API types, the RBAC only reads, the pod and the image run as non-root,
//! and every flag the Deployment passes exists in the agent's CLI.

use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use serde::Deserialize;

const MANIFEST: &str = include_str!("../../deploy/kubernetes/metrics-agent.yaml");
const DOCKERFILE: &str = include_str!("../../deploy/docker/metrics-agent.Dockerfile");

fn documents() -> Vec<serde_yaml_ng::Value> {
    serde_yaml_ng::Deserializer::from_str(MANIFEST).map(|d| serde_yaml_ng::Value::deserialize(d).unwrap()).collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(kind: &str) -> T {
    let doc = documents().into_iter().find(|d| d["kind"].as_str() == Some(kind)).unwrap_or_else(|| panic!("no {kind}"));
    serde_yaml_ng::from_value(doc).unwrap_or_else(|e| panic!("{kind} is not a valid {kind}: {e}"))
}

#[test]
fn the_agents_rbac_only_reads_what_it_watches() {
    let role: ClusterRole = of_kind("ClusterRole");
    let mut resources = Vec::new();
    for rule in role.rules.unwrap() {
        for verb in &rule.verbs {
            assert!(["get", "list", "watch"].contains(&verb.as_str()), "the agent's role may {verb}");
        }
        resources.extend(rule.resources.unwrap_or_default());
    }
    resources.sort();
    assert_eq!(resources, ["endpointslices", "inferencegatewayconfigs", "inferencepools", "pods"]);
}

#[test]
fn the_agents_pod_and_image_run_as_non_root() {
    let deployment: Deployment = of_kind("Deployment");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let security = pod.security_context.unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert!(security.run_as_user.is_some_and(|uid| uid != 0));
    let container = &pod.containers[0];
    let container_security = container.security_context.clone().unwrap();
    assert_eq!(container_security.allow_privilege_escalation, Some(false));
    assert_eq!(container_security.read_only_root_filesystem, Some(true));
    let user = DOCKERFILE.lines().rev().find_map(|l| l.strip_prefix("USER ")).expect("the image sets USER");
    assert!(user.split(':').all(|id| id.trim().parse::<u32>().is_ok_and(|id| id != 0)), "USER {user}");
    let last_stage = DOCKERFILE.lines().rev().find_map(|l| l.strip_prefix("FROM ")).unwrap();
    assert!(last_stage.contains("distroless") && last_stage.ends_with(":nonroot"), "{last_stage}");
}

#[test]
fn every_flag_the_deployment_passes_exists() {
    let deployment: Deployment = of_kind("Deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0].args.clone().unwrap();
    assert_eq!(args[0], "run");
    let help = Command::new(env!("CARGO_BIN_EXE_metrics-agent")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(&format!("{flag} ")), "`metrics-agent run` has no {flag}");
    }
}
