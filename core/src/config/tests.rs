use super::*;

const EXAMPLE: &str = include_str!("../../../examples/infergate.yaml");

#[test]
fn the_shipped_example_is_valid() {
    let config = InfergateConfig::from_yaml_str(EXAMPLE, "example").unwrap();
    assert_eq!(config.pools.len(), 2);
    assert_eq!(config.models[1].adapter.as_deref(), Some("sql-lora"));
    config.routing_config().validate().unwrap();
}

#[test]
fn defaults_fill_omitted_sections() {
    let text = "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n";
    let config = InfergateConfig::from_yaml_str(text, "t").unwrap();
    assert_eq!(config.gateway, GatewaySettings::default());
    assert_eq!(config.gateway.max_body_bytes, 8 * 1024 * 1024);
    assert_eq!(config.agent.scrape_interval_ms, 100);
}

fn error_of(text: &str) -> ConfigError {
    InfergateConfig::from_yaml_str(text, "infergate.yaml").unwrap_err()
}

#[test]
fn unknown_field_is_reported_with_its_line() {
    let err = error_of("version: 1\npools:\n  - name: a\n    endpoints: [127.0.0.1:1]\n    weigths: {}\nmodels: []\n");
    assert_eq!(err.location.map(|l| l.line), Some(5), "{err}");
    assert!(err.to_string().contains("weigths"), "{err}");
}

#[test]
fn unknown_pool_reference_points_at_the_line_of_the_field() {
    let text = "version: 1\npools:\n  - name: a\n    endpoints: [127.0.0.1:1]\nmodels:\n  - name: m1\n    pool: a\n  - name: m2\n    pool: b\n";
    let err = error_of(text);
    assert_eq!(err.path, "models[1].pool");
    assert_eq!(err.location.map(|l| l.line), Some(9), "{err}");
    assert!(err.to_string().starts_with("infergate.yaml:9:"), "{err}");
    assert!(err.message.contains("unknown pool \"b\""), "{err}");
}

#[test]
fn bad_endpoint_names_the_expected_format() {
    let err = error_of("version: 1\npools:\n  - name: a\n    endpoints: [pod-a:8000]\nmodels: [{name: m, pool: a}]\n");
    assert_eq!(err.location.map(|l| l.line), Some(4), "{err}");
    assert!(err.message.contains("expected ip:port"), "{err}");
}

#[test]
fn semantic_errors_name_the_field() {
    let cases = [
        ("version: 2\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n", "version"),
        ("version: 1\npools: [{name: A, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: A}]\n", "pools[0].name"),
        (
            "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1, 127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "pools[0].endpoints[1]",
        ),
        (
            "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}, {name: m, pool: a}]\n",
            "models[1].name",
        ),
        (
            "version: 1\nrouting: {weights: {kv_cache: -1}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "routing.weights.kv_cache",
        ),
        (
            "version: 1\ngateway: {max_body_bytes: 10}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "gateway.max_body_bytes",
        ),
        ("version: 1\npools: [{name: a, endpoints: []}]\nmodels: [{name: m, pool: a}]\n", "pools[0].endpoints"),
        (
            "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1], disaggregation: {prefill_endpoints: [127.0.0.1:2]}}]\nmodels: [{name: m, pool: a}]\n",
            "pools[0].disaggregation.prefill_endpoints[0]",
        ),
        (
            "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1, 127.0.0.1:2], disaggregation: {prefill_endpoints: [127.0.0.1:2], decode_endpoints: [127.0.0.1:1, 127.0.0.1:2]}}]\nmodels: [{name: m, pool: a}]\n",
            "pools[0].disaggregation.decode_endpoints[1]",
        ),
        (
            "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1], disaggregation: {transfer_gb_per_s: 0}}]\nmodels: [{name: m, pool: a}]\n",
            "pools[0].disaggregation.transfer_gb_per_s",
        ),
        (
            "version: 1\nrouting: {admission: {kv_cache_threshold: 1.5}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "routing.admission.kv_cache_threshold",
        ),
        (
            "version: 1\nrouting: {admission: {queue_depth_threshold: -1}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "routing.admission.queue_depth_threshold",
        ),
        (
            "version: 1\nflow_control: {bands: {standard: {max_wait_ms: 0}}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "flow_control.bands.standard.max_wait_ms",
        ),
        (
            "version: 1\nflow_control: {tenant_header: X-Tenant}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "flow_control.tenant_header",
        ),
        (
            "version: 1\nflow_control: {bands: {critical: {hold_above_ttft_ms: -5}}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "flow_control.bands.critical.hold_above_ttft_ms",
        ),
        (
            "version: 1\nflow_control: {max_queued: 0}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "flow_control.max_queued",
        ),
        (
            "version: 1\nflow_control: {bands: {sheddable: {max_engine_waiting: 0}}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
            "flow_control.bands.sheddable.max_engine_waiting",
        ),
    ];
    for (text, path) in cases {
        let err = error_of(text);
        assert_eq!(err.path, path, "{err}");
        assert!(err.location.is_some(), "no line for {err}");
    }
}

#[test]
fn criticality_is_read_and_an_unknown_level_is_refused_with_its_line() {
    let ok = "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a, criticality: sheddable}]\n";
    assert_eq!(InfergateConfig::from_yaml_str(ok, "t").unwrap().models[0].criticality, Criticality::Sheddable);
    let err = error_of(
        "version: 1\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels:\n  - {name: m, pool: a, criticality: urgent}\n",
    );
    assert_eq!(err.location.map(|l| l.line), Some(4), "{err}");
    assert!(err.message.contains("sheddable"), "{err}");
}

#[test]
fn model_names_must_be_header_safe() {
    assert!(check_model_name("llama\r\nx-evil: 1").is_err());
    assert!(check_model_name("").is_err());
    assert!(check_model_name(&"m".repeat(MAX_MODEL_NAME_BYTES + 1)).is_err());
    assert!(check_model_name("meta-llama/Llama-3.1-8B-Instruct").is_ok());
}

#[test]
fn discovery_sources_are_checked_and_reported_by_field() {
    let with = |discovery: &str| {
        format!("version: 1\npools:\n  - name: a\n    discovery: {discovery}\nmodels: [{{name: m, pool: a}}]\n")
    };
    let ok = with("{pods: {match_labels: {app.kubernetes.io/name: vllm, tier: \"\"}, target_ports: [8000, 8001]}}");
    let config = InfergateConfig::from_yaml_str(&ok, "infergate.yaml").unwrap();
    let pods = config.pools[0].discovery.as_ref().and_then(|d| d.pods.as_ref()).unwrap();
    assert_eq!(pods.namespace, "default");
    assert_eq!(pods.label_selector(), "app.kubernetes.io/name=vllm,tier=");
    let cases = [
        ("{}", "pools[0].discovery", "exactly one"),
        (
            "{pods: {match_labels: {app: a}, target_ports: [1]}, inference_pool: {name: p}}",
            "pools[0].discovery",
            "exactly one",
        ),
        ("{pods: {match_labels: {}, target_ports: [1]}}", "pools[0].discovery.pods.match_labels", "at least one"),
        (
            "{pods: {match_labels: {app: \"a,b=c\"}, target_ports: [1]}}",
            "pools[0].discovery.pods.match_labels",
            "(of app) is not a label value",
        ),
        (
            "{pods: {match_labels: {\"a b\": x}, target_ports: [1]}}",
            "pools[0].discovery.pods.match_labels",
            "label key",
        ),
        (
            "{pods: {match_labels: {app: a}, target_ports: []}}",
            "pools[0].discovery.pods.target_ports",
            "between 1 and 8",
        ),
        ("{pods: {match_labels: {app: a}, target_ports: [0]}}", "pools[0].discovery.pods.target_ports[0]", "port 0"),
        (
            "{pods: {namespace: Prod, match_labels: {app: a}, target_ports: [1]}}",
            "pools[0].discovery.pods.namespace",
            "RFC 1123",
        ),
        ("{inference_pool: {name: My_Pool}}", "pools[0].discovery.inference_pool.name", "RFC 1123"),
    ];
    for (discovery, path, message) in cases {
        let err = error_of(&with(discovery));
        assert_eq!(err.path, path, "{discovery}: {err}");
        assert!(err.message.contains(message), "{discovery}: {err}");
    }
    // A pool with neither endpoints nor discovery says both are possible.
    let err = error_of("version: 1\npools:\n  - name: a\nmodels: [{name: m, pool: a}]\n");
    assert!(err.message.contains("`discovery`"), "{err}");
}

#[test]
fn the_metrics_path_defaults_by_engine_and_a_bad_one_is_refused_with_its_line() {
    let text = "version: 1\npools:\n  - name: a\n    engine: trtllm\n    endpoints: [127.0.0.1:1]\n  - name: b\n    metrics_path: /stats/prometheus\n    endpoints: [127.0.0.1:2]\nmodels: [{name: m, pool: a}]\n";
    let config = InfergateConfig::from_yaml_str(text, "t").unwrap();
    let paths: Vec<&str> = config.pools.iter().map(PoolConfig::metrics_path).collect();
    assert_eq!(paths, ["/prometheus/metrics", "/stats/prometheus"]);
    assert_eq!(PoolConfig::static_endpoints("c", vec![]).metrics_path(), "/metrics");
    let err = error_of(&text.replace("/stats/prometheus", "metrics"));
    assert_eq!((err.path.as_str(), err.location.map(|l| l.line)), ("pools[1].metrics_path", Some(7)), "{err}");
    assert!(err.message.contains("starting with '/'"), "{err}");
}

#[test]
fn flow_control_is_read_with_its_policies_and_an_unknown_one_is_refused_with_its_line() {
    let ok = "version: 1\nflow_control:\n  enabled: true\n  fairness: round-robin\n  order: first-come\n  bands: {sheddable: {max_wait_ms: 500, hold_above_ttft_ms: 200}}\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n";
    let config = InfergateConfig::from_yaml_str(ok, "t").unwrap();
    let flow = &config.flow_control;
    assert!(flow.enabled);
    assert_eq!((flow.fairness, flow.order), (Fairness::RoundRobin, QueueOrder::FirstCome));
    let sheddable = flow.band(Criticality::Sheddable);
    assert_eq!((sheddable.max_wait_ms, sheddable.hold_above_ttft_ms), (500, Some(200.0)));
    assert_eq!(sheddable.max_engine_waiting, 1.0, "what a band leaves unset takes its default");
    let critical = flow.band(Criticality::Critical);
    assert_eq!((critical.max_wait_ms, critical.max_engine_waiting), (60_000, 4.0));
    assert_eq!(config.routing_config().flow_control, *flow, "the filter gets the same settings");
    let err = error_of(
        "version: 1\nflow_control:\n  fairness: lottery\npools: [{name: a, endpoints: [127.0.0.1:1]}]\nmodels: [{name: m, pool: a}]\n",
    );
    assert_eq!(err.location.map(|l| l.line), Some(3), "{err}");
    assert!(err.message.contains("attained-service"), "{err}");
}
