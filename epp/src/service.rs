//! The gRPC services: Envoy's `ExternalProcessor`, one [`Exchange`] per stream, and
//! the gRPC health service the endpoint picker protocol names (`liveness`,
//! `readiness`, and the ext_proc service itself, ready once a snapshot is adopted).

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use infergate_core::wire::epp;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::exchange::Exchange;
use crate::picker::Picker;

/// Answers in flight per stream before the stream waits for Envoy to read them.
const ANSWERS_BUFFERED: usize = 16;

pub struct ExtProc {
    pub picker: Arc<Picker>,
}

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProc {
    type ProcessStream = Answers;

    async fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Result<Response<Answers>, Status> {
        let mut messages = request.into_inner();
        let (answers, out) = tokio::sync::mpsc::channel(ANSWERS_BUFFERED);
        let picker = Arc::clone(&self.picker);
        tokio::spawn(async move {
            // Dropped when the stream ends, however it ends: the request is released.
            let mut exchange = Exchange::new(picker);
            while let Some(message) = messages.next().await {
                let message = match message {
                    Ok(message) => message,
                    Err(status) => {
                        tracing::debug!(%status, "ext_proc stream ended by the proxy");
                        break;
                    }
                };
                for answer in exchange.on_message(message) {
                    if answers.send(Ok(answer)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }
}

pub fn ext_proc_server(picker: Arc<Picker>) -> ExternalProcessorServer<ExtProc> {
    ExternalProcessorServer::new(ExtProc { picker })
}

/// Sets `HEALTH_STREAMS`: whether the picker takes new streams (until it drains).
pub async fn report_streams(reporter: &HealthReporter, accepting: bool) {
    let status = if accepting { ServingStatus::Serving } else { ServingStatus::NotServing };
    reporter.set_service_status(epp::HEALTH_STREAMS, status).await;
}

/// Sets the health services from the picker's state: alive now; ready (as `""`,
/// `readiness` and the ext_proc service) once it has a snapshot.
pub async fn report_health(reporter: &HealthReporter, ready: bool) {
    let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
    reporter.set_service_status(epp::HEALTH_LIVENESS, ServingStatus::Serving).await;
    for service in ["", epp::HEALTH_READINESS] {
        reporter.set_service_status(service, status).await;
    }
    if ready {
        reporter.set_serving::<ExternalProcessorServer<ExtProc>>().await;
    } else {
        reporter.set_not_serving::<ExternalProcessorServer<ExtProc>>().await;
    }
}
