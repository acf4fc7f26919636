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
