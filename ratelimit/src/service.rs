//! Envoy's gRPC rate limit API over the counters.

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use infergate_core::ApiError;
use infergate_core::global::RateLimits;
use tonic::{Request, Response, Status};

use crate::DOMAIN;
use crate::charge::{Charge, Kind};
use crate::counter::{Counter, window};

pub struct Limiter {
    pub limits: RateLimits,
    pub counter: Counter,
}

pub fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn header(key: &str, value: &str) -> HeaderValue {
    HeaderValue { key: key.into(), value: value.into(), ..Default::default() }
}

impl Limiter {
    fn limit_of(&self, charge: &Charge) -> u64 {
        let limits = self.limits.for_model(&charge.model);
        match charge.kind {
            Kind::Requests => limits.requests_per_minute,
            Kind::Tokens => limits.tokens_per_minute,
        }
    }

    /// Counts every charge of the request; the answer is over the limit if any is.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
        now_unix_s: u64,
    ) -> Result<RateLimitResponse, redis::RedisError> {
        let (window, retry_after_s) = window(now_unix_s);
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        let mut refused: Option<(Charge, u64)> = None;
        for descriptor in &request.descriptors {
            let Some(charge) = Charge::from_descriptor(descriptor, request.hits_addend) else {
                statuses.push(DescriptorStatus { code: Code::Ok.into(), ..Default::default() });
                continue;
            };
            let limit = self.limit_of(&charge);
            let count = self.counter.add(&charge.key(window), i64::try_from(charge.hits).unwrap_or(i64::MAX)).await?;
            let count = u64::try_from(count).unwrap_or(0);
            let over = count > limit;
            statuses.push(DescriptorStatus {
                code: if over { Code::OverLimit } else { Code::Ok }.into(),
                current_limit: Some(RateLimit {
                    requests_per_unit: u32::try_from(limit).unwrap_or(u32::MAX),
                    unit: Unit::Minute.into(),
                    ..Default::default()
                }),
                limit_remaining: u32::try_from(limit.saturating_sub(count)).unwrap_or(u32::MAX),
                ..Default::default()
            });
            if over && refused.is_none() {
                tracing::info!(tenant = %charge.tenant, model = %charge.model, kind = charge.kind.as_str(), count, limit, "over the limit");
                refused = Some((charge, limit));
            }
        }
        let Some((charge, limit)) = refused else {
            return Ok(RateLimitResponse { overall_code: Code::Ok.into(), statuses, ..Default::default() });
        };
        let error = ApiError::rate_limited(charge.kind.as_str(), limit, &charge.model, retry_after_s);
        Ok(RateLimitResponse {
            overall_code: Code::OverLimit.into(),
            statuses,
            response_headers_to_add: vec![
                header("content-type", "application/json"),
                header("retry-after", &retry_after_s.to_string()),
            ],
            raw_body: error.body(),
            ..Default::default()
        })
    }
}

#[tonic::async_trait]
impl RateLimitService for Limiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        if request.domain != DOMAIN {
            return Ok(Response::new(RateLimitResponse { overall_code: Code::Ok.into(), ..Default::default() }));
        }
        match self.decide(&request, unix_s()).await {
            Ok(response) => Ok(Response::new(response)),
            Err(err) => {
                // Envoy then applies its failure mode: admit, unless failure_mode_deny.
                tracing::warn!(error = %err, "cannot reach Redis");
                Err(Status::unavailable(format!("cannot reach Redis: {err}")))
            }
        }
    }
}
