use super::*;

const ENDPOINT_HEADER_NAME: &str = "x-gateway-destination-endpoint";

fn example() -> InfergateConfig {
    InfergateConfig::from_yaml_str(include_str!("../../examples/infergate.yaml"), "example").unwrap()
}

#[test]
fn one_override_host_cluster_per_pool() {
    let bootstrap = render_bootstrap(&example(), &RenderOptions::new("/x.wasm".into())).unwrap();
    let clusters = bootstrap["static_resources"]["clusters"].as_array().unwrap();
    let names: Vec<&str> = clusters.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["pool-llama", "pool-qwen"]);
    let lb = &clusters[0]["load_balancing_policy"]["policies"][0]["typed_extension_config"];
    assert_eq!(lb["name"], "envoy.load_balancing_policies.override_host");
    assert_eq!(lb["typed_config"]["override_host_sources"][0]["header"], ENDPOINT_HEADER_NAME);
}

#[test]
fn the_three_roles_share_one_vm_id_and_the_token_stays_out() {
    let bootstrap = render_bootstrap(&example(), &RenderOptions::new("/x.wasm".into())).unwrap();
    let text = bootstrap.to_string();
    assert_eq!(text.matches("\"vm_id\":\"infergate\"").count(), 3);
    assert!(text.contains("INFERGATE_CONTROL_TOKEN"));
    assert!(text.contains("\"allow_on_headers_stop_iteration\":true"));
}

#[test]
fn a_lora_models_route_retries_a_404_on_another_pod_and_a_base_models_does_not() {
    let bootstrap = render_bootstrap(&example(), &RenderOptions::new("/x.wasm".into())).unwrap();
    let filters = &bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0];
    let routes = filters["typed_config"]["route_config"]["virtual_hosts"][0]["routes"].as_array().unwrap();
    let first = &routes[0];
    let headers: Vec<(&str, &str)> = first["match"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].as_str().unwrap(), h["string_match"]["exact"].as_str().unwrap()))
        .collect();
    assert_eq!(headers, [("x-infergate-pool", "llama"), ("x-gateway-model-name", "sql-lora")]);
    assert_eq!(first["route"]["retry_policy"]["retriable_status_codes"], serde_json::json!([503, 404]));
    let pool_route = routes.iter().find(|r| r["match"]["headers"].as_array().is_some_and(|h| h.len() == 1)).unwrap();
    assert_eq!(pool_route["route"]["retry_policy"]["retriable_status_codes"], serde_json::json!([503]));
    assert_eq!(routes.iter().filter(|r| r["match"]["headers"].as_array().is_some_and(|h| h.len() == 2)).count(), 1);
}

#[test]
fn the_listener_buffer_exceeds_the_body_limit() {
    let config = example();
    let bootstrap = render_bootstrap(&config, &RenderOptions::new("/x.wasm".into())).unwrap();
    let limit = bootstrap["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"].as_u64().unwrap();
    assert!(limit > config.gateway.max_body_bytes);
}

#[test]
fn baselines_have_no_wasm() {
    let options = RenderOptions { upstream_policy: UpstreamPolicy::RoundRobin, ..RenderOptions::new("/x.wasm".into()) };
    let text = render_bootstrap(&example(), &options).unwrap().to_string();
    assert!(!text.contains("wasm"));
    assert!(text.contains("envoy.load_balancing_policies.round_robin"));
}

#[test]
fn with_the_picker_over_ext_proc_there_is_no_wasm_and_no_control_listener() {
    let options = RenderOptions::ext_proc(vec!["127.0.0.1:9002".parse().unwrap()]);
    let bootstrap = render_bootstrap(&example(), &options).unwrap();
    let text = bootstrap.to_string();
    assert!(!text.contains("wasm"));
    let listeners = bootstrap["static_resources"]["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 1, "the agent pushes to the picker, not to Envoy");
    let filters = &listeners[0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
    let ext_proc = &filters[0]["typed_config"];
    assert_eq!(ext_proc["processing_mode"]["request_body_mode"], "FULL_DUPLEX_STREAMED");
    assert_eq!(ext_proc["processing_mode"]["request_trailer_mode"], "SEND");
    assert_eq!(ext_proc["failure_mode_allow"], false);
    assert_eq!(ext_proc["grpc_service"]["envoy_grpc"]["cluster_name"], "infergate-epp");
    let clusters = bootstrap["static_resources"]["clusters"].as_array().unwrap();
    let picker = clusters.iter().find(|c| c["name"] == "infergate-epp").unwrap();
    assert!(picker.to_string().contains("http2_protocol_options"));
    // The pools still pick the ranked pod from the header the picker sets.
    assert!(text.contains("envoy.load_balancing_policies.override_host"));
}

#[test]
fn several_pickers_are_health_checked_and_a_stream_that_cannot_start_moves_on() {
    let alone =
        render_bootstrap(&example(), &RenderOptions::ext_proc(vec!["127.0.0.1:9002".parse().unwrap()])).unwrap();
    let cluster = |bootstrap: &serde_json::Value| {
        let clusters = bootstrap["static_resources"]["clusters"].as_array().unwrap().clone();
        clusters.into_iter().find(|c| c["name"] == "infergate-epp").unwrap()
    };
    assert!(cluster(&alone).get("health_checks").is_none(), "one picker: as before");
    let pickers = vec!["127.0.0.1:9002".parse().unwrap(), "127.0.0.1:9003".parse().unwrap()];
    let two = render_bootstrap(&example(), &RenderOptions::ext_proc(pickers)).unwrap();
    let picked = cluster(&two);
    assert_eq!(picked["load_assignment"]["endpoints"][0]["lb_endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(picked["health_checks"][0]["grpc_health_check"]["service_name"], "infergate.epp.streams");
    assert_eq!(picked["common_lb_config"]["healthy_panic_threshold"]["value"], 0.0);
    let listeners = two["static_resources"]["listeners"].as_array().unwrap();
    let ext_proc = &listeners[0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0]["typed_config"];
    let retry = &ext_proc["grpc_service"]["retry_policy"];
    assert_eq!(retry["num_retries"], 1);
    assert!(retry["retry_on"].as_str().unwrap().contains("connect-failure"));
    assert_eq!(ext_proc["failure_mode_allow"], false, "never unrouted, however many pickers");
}
