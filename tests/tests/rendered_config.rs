//! Every bootstrap we render passes Envoy's own validation.

use infergate_core::config::InfergateConfig;
use infergate_core::global::GlobalRouterConfig;
use infergate_e2e::artifacts;
use infergate_envoy_config::{
    RenderOptions, UpstreamPolicy, WasmRuntime, render_bootstrap_yaml, render_global_bootstrap_yaml,
};

fn example() -> InfergateConfig {
    InfergateConfig::from_yaml_file(&artifacts::workspace_root().join("examples/infergate.yaml"))
        .expect("the example config")
}

fn validate(options: &RenderOptions) {
    if let Err(log) = artifacts::envoy_validate(&render_bootstrap_yaml(&example(), options).unwrap()) {
        panic!("envoy rejected the config for {options:?}:\n{log}");
    }
}

// The PyPI build of Envoy 1.40 has only the V8 runtime compiled in: wasmtime and WAMR
// are rejected with "Envoy was compiled without support for it", so only V8 is checked.
#[test]
fn the_example_bootstrap_validates_with_the_filter_and_with_each_baseline() {
    let wasm = artifacts::filter_wasm();
    validate(&RenderOptions { runtime: WasmRuntime::V8, ..RenderOptions::new(wasm.clone()) });
    for upstream_policy in [UpstreamPolicy::RoundRobin, UpstreamPolicy::LeastRequest, UpstreamPolicy::Random] {
        validate(&RenderOptions { upstream_policy, ..RenderOptions::new(wasm.clone()) });
    }
    // With infergate-epp over ext_proc instead of the filter.
    validate(&RenderOptions::ext_proc(vec!["127.0.0.1:9002".parse().unwrap()]));
    // With two active-active pickers: health checks and the gRPC retry policy.
    validate(&RenderOptions::ext_proc(vec!["127.0.0.1:9002".parse().unwrap(), "127.0.0.1:9003".parse().unwrap()]));
}

#[test]
fn the_filter_refuses_an_invalid_plugin_configuration() {
    let mut text = render_bootstrap_yaml(&example(), &RenderOptions::new(artifacts::filter_wasm())).unwrap();
    // A router role whose model points at a pool that does not exist.
    text = text.replacen(r#""pool":"qwen""#, r#""pool":"missing""#, 1);
    assert!(text.contains("missing"), "the test edit did not apply");
    let log = artifacts::envoy_validate(&text).expect_err("an invalid routing config was accepted");
    assert!(log.contains("unknown pool"), "the error does not say why:\n{log}");
}

#[test]
fn the_example_global_router_bootstrap_validates() {
    let path = artifacts::workspace_root().join("examples/infergate-global.yaml");
    let config = GlobalRouterConfig::from_yaml_file(&path).expect("the example global config");
    let text = render_global_bootstrap_yaml(&config, &RenderOptions::new(artifacts::filter_wasm())).unwrap();
    if let Err(log) = artifacts::envoy_validate(&text) {
        panic!("envoy rejected the global bootstrap:\n{log}");
    }
}

/// Both ways of giving the JWKS, on the gateway and on the global router, render
/// bootstraps that Envoy accepts: the header removal, `jwt_authn` and, for a remote
/// JWKS, the TLS cluster it is fetched through.
#[test]
fn identity_from_a_jwt_renders_bootstraps_envoy_accepts() {
    use infergate_core::config::{IdentitySettings, IdentitySource, JwtSettings};
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        r#"{"keys":[{"kty":"oct","alg":"HS256","kid":"k1","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}]}"#,
    )
    .unwrap();
    let identity = |file: Option<String>, uri: Option<&str>| IdentitySettings {
        source: IdentitySource::Jwt,
        header: None,
        jwt: Some(JwtSettings {
            issuer: "https://auth.example.com/".into(),
            audiences: vec!["infergate".into()],
            jwks_file: file,
            jwks_uri: uri.map(Into::into),
            claim: "sub".into(),
        }),
        required: true,
    };
    let options = RenderOptions::new(artifacts::filter_wasm());
    let global_path = artifacts::workspace_root().join("examples/infergate-global.yaml");
    for identity in [
        identity(Some(jwks.display().to_string()), None),
        identity(None, Some("https://auth.example.com/.well-known/jwks.json")),
    ] {
        let mut config = example();
        config.identity = identity.clone();
        config.validate().unwrap();
        let text = render_bootstrap_yaml(&config, &options).unwrap();
        assert!(text.contains("envoy.filters.http.jwt_authn") && text.contains("x-infergate-identity"));
        if let Err(log) = artifacts::envoy_validate(&text) {
            panic!("envoy rejected the gateway with {identity:?}:\n{log}");
        }
        let mut global = GlobalRouterConfig::from_yaml_file(&global_path).unwrap();
        global.identity = identity.clone();
        global.validate().unwrap();
        let text = render_global_bootstrap_yaml(&global, &options).unwrap();
        if let Err(log) = artifacts::envoy_validate(&text) {
            panic!("envoy rejected the global router with {identity:?}:\n{log}");
        }
    }
}
