//! Every manifest we ship validates against the real CRD schemas (in the strict form the
//! API server's pruning implies) or against Kubernetes' own types; so do the manifests
//! `infergate-envoy-config` renders. And the validation can fail.

use std::path::{Path, PathBuf};

use infergate_core::config::InfergateConfig;
use infergate_envoy_config::kubernetes::{
    GatewayRef, KubernetesOptions, WasmSource, envoy_gateway, inference_pool, istio,
};
use infergate_kind_test::crd_schemas::CrdCatalog;
use infergate_kind_test::{core_kinds, manifests, workspace_root};
use serde_json::{Value, json};

fn catalog() -> CrdCatalog {
    let root = workspace_root();
    CrdCatalog::load(&[&root.join("kind-test/crds"), &root.join("deploy/crds")]).expect("the CRDs load")
}

fn validate(catalog: &CrdCatalog, document: &Value) -> Result<(), Vec<String>> {
    let (api_version, kind) = manifests::type_of(document);
    if core_kinds::knows(&api_version, &kind) { core_kinds::validate(document) } else { catalog.validate(document) }
}

fn assert_all_valid(catalog: &CrdCatalog, source: &str, documents: &[Value]) {
    assert!(!documents.is_empty(), "{source} has no manifests");
    for document in documents {
        if let Err(errors) = validate(catalog, document) {
            panic!("{source}: {} is invalid:\n  {}", manifests::describe(document), errors.join("\n  "));
        }
    }
}

/// The manifest files we ship: the agent's, the CRD and its example, the kind demo's.
fn shipped_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["deploy/kubernetes", "deploy/crds", "deploy/examples", "kind-test/manifests"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

fn kind_config() -> InfergateConfig {
    InfergateConfig::from_yaml_file(&workspace_root().join("kind-test/infergate.yaml"))
        .expect("kind-test/infergate.yaml")
}

fn options(image: Option<&str>, pods_namespace: &str) -> KubernetesOptions {
    let gateway = GatewayRef {
        namespace: "infergate-demo".into(),
        name: "infergate".into(),
        listener: "http".into(),
        port: 80,
        pods_namespace: pods_namespace.into(),
    };
    let wasm = WasmSource {
        url: "http://infergate-wasm.infergate-demo.svc:8080/infergate_filter.wasm".into(),
        sha256: "9".repeat(64),
        image: image.map(str::to_string),
    };
    KubernetesOptions::new(gateway, wasm)
}

#[test]
fn every_shipped_manifest_validates() {
    let catalog = catalog();
    let files = shipped_files();
    assert!(files.len() >= 8, "found only {files:?}");
    for file in files {
        let documents = manifests::documents(&file).unwrap();
        assert_all_valid(&catalog, &file.display().to_string(), &documents);
    }
}

#[test]
fn the_rendered_envoy_gateway_and_istio_manifests_validate() {
    let catalog = catalog();
    let config = kind_config();
    for image in [None, Some("ghcr.io/infergate/infergate-filter:0.1.0")] {
        let documents = envoy_gateway::render(&config, &options(image, "envoy-gateway-system")).unwrap();
        let kinds: Vec<&str> = documents.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Service",
                "HTTPRoute",
                "EnvoyExtensionPolicy",
                "EnvoyPatchPolicy",
                "EnvoyProxy",
                "Service",
                "NetworkPolicy"
            ]
        );
        assert_all_valid(&catalog, "Envoy Gateway render", &documents);
    }
    let documents = istio::render(&config, &options(None, "infergate-demo")).unwrap();
    assert_all_valid(&catalog, "Istio render", &documents);
    // The deployment overlay Istio reads is itself YAML inside the ConfigMap.
    let overlay = documents.iter().find(|d| d["kind"] == "ConfigMap").unwrap()["data"]["deployment"].as_str().unwrap();
    let overlay: Value = serde_yaml_ng::from_str(overlay).unwrap();
    assert_eq!(overlay["spec"]["template"]["spec"]["containers"][0]["name"], "istio-proxy");
}

/// Envoy Gateway and Istio name each pool's cluster; the router's plugin config names
/// them too, so that a split request's prefill leg reaches the cluster the platform's
/// patches give the `override_host` policy.
#[test]
fn the_router_is_told_each_pools_cluster_as_the_platform_names_it() {
    let config = kind_config();
    let pools: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();

    let documents = envoy_gateway::render(&config, &options(None, "envoy-gateway-system")).unwrap();
    let policy = documents.iter().find(|d| d["kind"] == "EnvoyExtensionPolicy").unwrap();
    let told = &policy["spec"]["wasm"][0]["config"]["pool_clusters"];
    let patched: Vec<&str> = documents.iter().find(|d| d["kind"] == "EnvoyPatchPolicy").unwrap()["spec"]["jsonPatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["type"].as_str().is_some_and(|t| t.ends_with("cluster.v3.Cluster"))
                && p["operation"]["path"] == "/load_balancing_policy"
        })
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let named: Vec<&str> = pools.iter().map(|pool| told[*pool].as_str().unwrap()).collect();
    assert_eq!(named, patched, "{told}");
    assert!(named.iter().all(|c| c.starts_with("httproute/")), "{named:?}");

    let documents = istio::render(&config, &options(None, "infergate-demo")).unwrap();
    let filter = documents.iter().find(|d| d["kind"] == "EnvoyFilter").unwrap();
    let patches = filter["spec"]["configPatches"].as_array().unwrap();
    let extension = patches.iter().find(|p| p["applyTo"] == "EXTENSION_CONFIG").unwrap();
    let text = extension["patch"]["value"]["typed_config"]["config"]["configuration"]["value"].as_str().unwrap();
    let role: Value = serde_json::from_str(text).unwrap();
    let patched: Vec<String> = patches
        .iter()
        .filter(|p| p["applyTo"] == "CLUSTER")
        .map(|p| {
            let m = &p["match"]["cluster"];
            format!("outbound|{}||{}", m["portNumber"], m["service"].as_str().unwrap())
        })
        .collect();
    let named: Vec<String> =
        pools.iter().map(|pool| role["pool_clusters"][*pool].as_str().unwrap().to_string()).collect();
    assert_eq!(named, patched, "{}", role["pool_clusters"]);
}

/// A `jwt` identity with a remote JWKS: each platform's patch resource carries the
/// removal of the client's identity header, then `jwt_authn`, ahead of the router, and
/// the JWKS's cluster; the manifests still validate.
#[test]
fn a_jwt_identity_is_patched_in_ahead_of_the_router_on_both_platforms() {
    use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
    let catalog = catalog();
    let mut config = kind_config();
    config.identity = IdentitySettings {
        source: IdentitySource::Jwt,
        header: None,
        jwt: Some(JwtSettings {
            issuer: "https://auth.example.com/".into(),
            audiences: vec!["infergate".into()],
            jwks_file: None,
            jwks_uri: Some("https://auth.example.com/keys".into()),
            claim: "sub".into(),
        }),
        required: true,
    };
    let documents = envoy_gateway::render(&config, &options(None, "envoy-gateway-system")).unwrap();
    assert_all_valid(&catalog, "Envoy Gateway render with identity", &documents);
    let policy = documents.iter().find(|d| d["kind"] == "EnvoyPatchPolicy").unwrap();
    let patches = policy["spec"]["jsonPatches"].as_array().unwrap();
    let firsts: Vec<(&str, &str)> = patches
        .iter()
        .take(2)
        .map(|p| (p["operation"]["path"].as_str().unwrap(), p["operation"]["value"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(firsts, [("/0", "infergate.identity.remove_client_copy"), ("/1", "envoy.filters.http.jwt_authn")]);
    assert!(patches.iter().any(|p| p["name"] == "infergate-jwks" && p["operation"]["path"] == ""));

    let documents = istio::render(&config, &options(None, "infergate-demo")).unwrap();
    assert_all_valid(&catalog, "Istio render with identity", &documents);
    let filter = documents.iter().find(|d| d["kind"] == "EnvoyFilter").unwrap();
    let inserted: Vec<&str> = filter["spec"]["configPatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["applyTo"] == "HTTP_FILTER")
        .map(|p| p["patch"]["value"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(inserted, ["infergate.identity.remove_client_copy", "envoy.filters.http.jwt_authn", "infergate-router"]);
}

#[test]
fn the_rendered_inference_pool_deployment_validates_against_the_inference_extensions_crds() {
    // kind-test/crds holds the Inference Extension's InferencePool v1 CRD as it ships it.
    let catalog = catalog();
    assert!(catalog.knows("inference.networking.k8s.io/v1", "InferencePool"));
    let documents =
        inference_pool::render(&kind_config(), &options(None, "infergate-demo"), "infergate/epp:0.1.0").unwrap();
    let kinds: Vec<&str> = documents.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment", "Service", "Service", "InferencePool", "HTTPRoute"]);
    assert_all_valid(&catalog, "InferencePool render", &documents);
    // Two pickers, active-active; the agent pushes to each through the headless
    // Service, before either is ready.
    assert_eq!(documents[1]["spec"]["replicas"], inference_pool::PICKER_REPLICAS);
    assert_eq!(documents[3]["metadata"]["name"], inference_pool::PICKER_CONTROL);
    assert_eq!(documents[3]["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(documents[3]["spec"]["ports"][0]["name"], "control");
    let pool = &documents[4]["spec"];
    assert_eq!(pool["endpointPickerRef"]["name"], inference_pool::PICKER);
    assert_eq!(pool["endpointPickerRef"]["port"]["number"], inference_pool::PICKER_GRPC_PORT);
    let route = &documents[5]["spec"]["rules"];
    assert_eq!(route[0]["backendRefs"][0]["kind"], "InferencePool");
    // The picker reads the same config the agent would, from its ConfigMap.
    let text = documents[0]["data"]["infergate.yaml"].as_str().unwrap();
    assert_eq!(InfergateConfig::from_yaml_str(text, "the picker's ConfigMap").unwrap(), kind_config());
}

#[test]
fn the_validation_catches_misspelled_fields_bad_values_and_unknown_kinds() {
    let catalog = catalog();
    let documents = envoy_gateway::render(&kind_config(), &options(None, "envoy-gateway-system")).unwrap();
    let route = documents.iter().find(|d| d["kind"] == "HTTPRoute").unwrap();
    let patch_policy = documents.iter().find(|d| d["kind"] == "EnvoyPatchPolicy").unwrap();
    let service = documents.iter().find(|d| d["kind"] == "Service").unwrap();

    let mut misspelled = route.clone();
    misspelled["spec"]["rules"][0]["backendRef"] = misspelled["spec"]["rules"][0]["backendRefs"].take();
    let errors = validate(&catalog, &misspelled).unwrap_err();
    assert!(errors.iter().any(|e| e.contains("/spec/rules/0") && e.contains("backendRef")), "{errors:?}");

    let mut bad_op = patch_policy.clone();
    bad_op["spec"]["jsonPatches"][0]["operation"]["op"] = json!("merge");
    let errors = validate(&catalog, &bad_op).unwrap_err();
    assert!(errors.iter().any(|e| e.contains("/spec/jsonPatches/0/operation/op")), "{errors:?}");

    let mut bad_port = route.clone();
    bad_port["spec"]["rules"][0]["backendRefs"][0]["port"] = json!(70000);
    assert!(validate(&catalog, &bad_port).is_err());

    let mut core_typo = service.clone();
    core_typo["spec"]["selectr"] = core_typo["spec"]["selector"].take();
    let errors = validate(&catalog, &core_typo).unwrap_err();
    assert!(errors.iter().any(|e| e.contains("/spec/selectr")), "{errors:?}");

    let unknown = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    assert!(validate(&catalog, &unknown).unwrap_err()[0].contains("no CRD schema"));
}

#[test]
fn the_demo_agent_reads_the_same_config_as_the_gateway_render() {
    let path = workspace_root().join("kind-test/manifests/40-inferencegatewayconfig.yaml");
    let resource = manifests::documents(&path).unwrap().remove(0);
    let from_resource: InfergateConfig = serde_json::from_value(resource["spec"].clone()).unwrap();
    assert_eq!(from_resource, kind_config());
}

#[test]
fn a_pool_without_a_pod_selector_is_refused_with_its_name() {
    let example = InfergateConfig::from_yaml_file(&workspace_root().join("examples/infergate.yaml")).unwrap();
    let error = envoy_gateway::render(&example, &options(None, "envoy-gateway-system")).unwrap_err();
    assert!(error.to_string().starts_with("pool llama: Kubernetes manifests need `discovery.pods`"), "{error}");
}

/// Every file run.sh gives `kubectl apply -f` is one the tests above validate, or the
/// render they validate.
#[test]
fn run_sh_is_shellcheck_clean_and_applies_only_validated_files() {
    let root = workspace_root();
    let script_path = root.join("kind-test/run.sh");
    let output = std::process::Command::new("shellcheck")
        .arg(&script_path)
        .output()
        .expect("shellcheck is installed by `make setup` (apt-get install shellcheck)");
    assert!(output.status.success(), "shellcheck:\n{}", String::from_utf8_lossy(&output.stdout));

    let script = std::fs::read_to_string(&script_path).unwrap();
    let validated: Vec<PathBuf> = shipped_files();
    let mut applied = 0;
    for line in script.lines().filter(|l| l.contains("kubectl apply")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2).filter(|w| w[0] == "-f") {
            let file = pair[1].trim_matches('"');
            applied += 1;
            if file == "$WORK/gateway.yaml" {
                continue; // rendered by infergate-envoy-config: validated above
            }
            let path = resolve(&root, file);
            assert!(validated.contains(&path), "run.sh applies {file}, which no test validates");
        }
    }
    assert!(applied >= 7, "found only {applied} applied files in run.sh");
}

fn resolve(root: &Path, file: &str) -> PathBuf {
    PathBuf::from(
        file.replace("$HERE", &root.join("kind-test").display().to_string())
            .replace("$ROOT", &root.display().to_string()),
    )
}
