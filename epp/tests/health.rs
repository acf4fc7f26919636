//! The gRPC services on a real socket: health answers what the endpoint picker protocol
//! names (alive at once, ready once a snapshot is in), and the ext_proc service routes
//! one request over a real HTTP/2 stream.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, HttpHeaders, ProcessingRequest};
use infergate_core::config::InfergateConfig;
use infergate_core::snapshot::{SNAPSHOT_VERSION, Snapshot};
use infergate_epp::picker::{Picker, PickerSettings, now_ms};
use infergate_epp::service;
use tonic::transport::{Channel, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn config() -> InfergateConfig {
    InfergateConfig::from_yaml_str(include_str!("../../examples/infergate.yaml"), "examples/infergate.yaml").unwrap()
}

async fn status(client: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    let answer = client.check(HealthCheckRequest { service: service.to_string() }).await.unwrap();
    answer.into_inner().status()
}

#[tokio::test]
async fn health_follows_the_snapshot_and_a_request_is_routed_over_a_real_stream() {
    let config = config();
    let settings = PickerSettings { max_body_bytes: 1 << 20, early_decision: true, explain: false };
    let picker = Arc::new(Picker::new(config.routing_config(), settings, 1));
    let (reporter, health) = tonic_health::server::health_reporter();
    service::report_health(&reporter, false).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let served = Arc::clone(&picker);
    tokio::spawn(async move {
        Server::builder()
            .add_service(health)
            .add_service(service::ext_proc_server(served))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    let channel = Channel::from_shared(format!("http://{address}")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel.clone());
    assert_eq!(status(&mut health, "liveness").await, ServingStatus::Serving);
    for name in ["", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"] {
        assert_eq!(status(&mut health, name).await, ServingStatus::NotServing, "{name:?} before a snapshot");
    }

    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        sequence: 1,
        created_at_ms: now_ms(),
        routing: config.routing_config(),
        pools: Vec::new(),
        peers: Default::default(),
    };
    picker.push_snapshot(&snapshot.encode().unwrap(), false).unwrap();
    assert!(picker.push_snapshot(&snapshot.encode().unwrap(), false).is_err(), "a replayed sequence is refused");
    service::report_health(&reporter, picker.ready()).await;
    for name in ["", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"] {
        assert_eq!(status(&mut health, name).await, ServingStatus::Serving, "{name:?} after a snapshot");
    }

    let body = br#"{"model":"Qwen/Qwen2.5-7B-Instruct","prompt":"hi"}"#.to_vec();
    let header =
        |k: &str, v: &str| HeaderValue { key: k.into(), raw_value: v.as_bytes().to_vec(), ..Default::default() };
    let messages = vec![
        ProcessingRequest {
            request: Some(Request::RequestHeaders(HttpHeaders {
                headers: Some(HeaderMap {
                    headers: vec![
                        header(":method", "POST"),
                        header(":path", "/v1/completions"),
                        header("content-length", &body.len().to_string()),
                    ],
                }),
                ..Default::default()
            })),
            ..Default::default()
        },
        ProcessingRequest {
            request: Some(Request::RequestBody(HttpBody {
                body: body.clone(),
                end_of_stream: true,
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    let mut processor = ExternalProcessorClient::new(channel);
    let mut answers = processor.process(tokio_stream::iter(messages)).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), answers.message()).await.unwrap().unwrap().unwrap();
    let Some(Response::RequestHeaders(headers)) = first.response else { panic!("{first:?}") };
    let set = headers.response.unwrap().header_mutation.unwrap().set_headers;
    let endpoint = set.iter().find_map(|h| h.header.as_ref().filter(|h| h.key == "x-gateway-destination-endpoint"));
    assert_eq!(endpoint.map(|h| h.raw_value.clone()), Some(b"127.0.0.1:8004".to_vec()), "the qwen pool's one pod");
    let second = answers.message().await.unwrap().unwrap();
    assert!(matches!(second.response, Some(Response::RequestBody(_))));
}
