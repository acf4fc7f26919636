//! vLLM's prefill/decode protocol on the wire, as its NixlConnector and its toy proxy
//! speak it: a pod's KV role, the `kv_transfer_params` a request carries, which leg of
//! a split request that makes it, and the params a prefill leg answers with.

use serde_json::{Value, json};

/// The request and response field that carries the handover.
pub const KV_TRANSFER_PARAMS: &str = "kv_transfer_params";

/// What a pod does in a split, by vLLM's `kv_role` (`kv_producer`, `kv_consumer`,
/// `kv_both`). Every role serves plain requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum KvRole {
    /// Prefill legs only: a decode leg is refused.
    #[value(alias = "kv_producer")]
    Producer,
    /// Decode legs only: a prefill leg is refused.
    #[value(alias = "kv_consumer")]
    Consumer,
    /// Either leg.
    #[default]
    #[value(alias = "kv_both")]
    Both,
}

impl KvRole {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "producer" | "kv_producer" => Ok(Self::Producer),
            "consumer" | "kv_consumer" => Ok(Self::Consumer),
            "both" | "kv_both" => Ok(Self::Both),
            other => Err(format!("kv_role must be producer, consumer or both, got {other:?}")),
        }
    }

    /// Refuses the leg this role does not serve, with the reason.
    pub fn admit(self, leg: &Leg) -> Result<(), String> {
        match (self, leg) {
            (Self::Consumer, Leg::Prefill) => Err(
                "this pod's kv_role is consumer: it does not serve a prefill leg (kv_transfer_params.do_remote_decode)"
                    .to_string(),
            ),
            (Self::Producer, Leg::Decode(_)) => Err(
                "this pod's kv_role is producer: it does not serve a decode leg (kv_transfer_params.do_remote_prefill)"
                    .to_string(),
            ),
            _ => Ok(()),
        }
    }
}

/// One pod's part in prefill/decode disaggregation.
#[derive(Debug, Clone, PartialEq)]
pub struct PdSettings {
    pub role: KvRole,
    /// KV-cache bytes per prompt token a transfer moves (131,072: Llama-3.1-8B, BF16).
    pub kv_bytes_per_token: u64,
    /// The bandwidth of the pod's inbound KV link, 10⁹ bytes per simulated second.
    pub transfer_gb_per_s: f64,
    /// Simulated seconds a prefilled prompt's KV waits for its decode pod (vLLM's
    /// `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`, 480).
    pub lease_s: f64,
    /// Run llm-d's routing sidecar in front of the pod: a request with
    /// `x-prefiller-host-port` has its prefill leg sent there first.
    pub sidecar: bool,
    /// The host a prefill leg's answer tells the decode pod to fetch the KV from;
    /// `None`: the pod's bind address (127.0.0.1 when that is unspecified).
    pub kv_host: Option<String>,
}

impl Default for PdSettings {
    fn default() -> Self {
        Self {
            role: KvRole::Both,
            kv_bytes_per_token: 131_072,
            transfer_gb_per_s: 25.0,
            lease_s: 480.0,
            sidecar: false,
            kv_host: None,
        }
    }
}

impl PdSettings {
    /// Simulated seconds to move `tokens` of KV over the link, queueing aside.
    pub fn transfer_seconds(&self, tokens: u64) -> f64 {
        (tokens.saturating_mul(self.kv_bytes_per_token)) as f64 / (self.transfer_gb_per_s * 1e9)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.transfer_gb_per_s.is_finite() && self.transfer_gb_per_s > 0.0) {
            return Err(format!("kv_transfer_gb_per_s must be above 0, got {}", self.transfer_gb_per_s));
        }
        if !(self.lease_s.is_finite() && self.lease_s > 0.0) {
            return Err(format!("kv_lease_s must be above 0, got {}", self.lease_s));
        }
        Ok(())
    }

    /// Applies one `--pod-override` assignment if `key` is a P/D setting; `None` when
    /// it is not one (then it names a profile field).
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let bad = |what: &str| format!("{key}: {value:?} is not {what}");
        let result = match key {
            "kv_role" => KvRole::parse(value).map(|role| self.role = role),
            "kv_bytes_per_token" => {
                value.parse().map(|v| self.kv_bytes_per_token = v).map_err(|_| bad("a whole number"))
            }
            "kv_transfer_gb_per_s" => value.parse().map(|v| self.transfer_gb_per_s = v).map_err(|_| bad("a number")),
            "pd_sidecar" => value.parse().map(|v| self.sidecar = v).map_err(|_| bad("true or false")),
            _ => return None,
        };
        Some(result)
    }
}

/// Where a decode leg fetches its prompt's KV: the prefill pod and its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteKv {
    pub host: String,
    pub port: u16,
    pub request_id: String,
}

impl RemoteKv {
    /// `host:port`, with an IPv6 host in brackets.
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }
}

pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// Which part of a request a pod serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leg {
    /// No handover: prefill and decode here.
    Whole,
    /// `do_remote_decode`: prefill here and hand the KV to a decode pod.
    Prefill,
    /// `do_remote_prefill`: the prompt's KV comes from a prefill pod.
    Decode(RemoteKv),
}

impl Leg {
    /// Reads a request's `kv_transfer_params` (absent or null: a whole request). The
    /// error names what is wrong, for a 400 with `param: "kv_transfer_params"`.
    pub fn of(params: Option<&Value>) -> Result<Self, String> {
        let params = match params {
            None | Some(Value::Null) => return Ok(Self::Whole),
            Some(Value::Object(params)) => params,
            Some(_) => return Err("kv_transfer_params must be an object".to_string()),
        };
        let flag = |name: &str| params.get(name).and_then(Value::as_bool).unwrap_or(false);
        match (flag("do_remote_decode"), flag("do_remote_prefill")) {
            (true, true) => {
                Err("kv_transfer_params cannot set both do_remote_decode and do_remote_prefill".to_string())
            }
            (true, false) => Ok(Self::Prefill),
            (false, false) => Ok(Self::Whole),
            (false, true) => {
                let text = |name: &str| {
                    params
                        .get(name)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| format!("a decode leg (do_remote_prefill) needs kv_transfer_params.{name}"))
                };
                let host = text("remote_host")?;
                let port = params
                    .get("remote_port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|&p| p > 0)
                    .ok_or_else(|| {
                        "a decode leg (do_remote_prefill) needs kv_transfer_params.remote_port, a port number"
                            .to_string()
                    })?;
                let request_id = text("remote_request_id")?;
                Ok(Self::Decode(RemoteKv { host, port, request_id }))
            }
        }
    }
}

/// How a prefill pod names itself in a prefill leg's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefillSource<'a> {
    pub engine_id: &'a str,
    pub host: &'a str,
    pub port: u16,
}

/// The `kv_transfer_params` a prefill leg answers with: what the decode leg must carry.
pub fn prefill_answer(source: &PrefillSource<'_>, request_id: &str, block_ids: &[u64]) -> Value {
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": source.engine_id,
        "remote_block_ids": block_ids,
        "remote_host": source.host,
        "remote_port": source.port,
        "remote_request_id": request_id,
        "tp_size": 1,
    })
}

/// The `kv_transfer_params` of a prefill leg as llm-d's sidecar and vLLM's toy proxy
/// send it.
pub fn prefill_request() -> Value {
    json!({
        "do_remote_decode": true,
        "do_remote_prefill": false,
        "remote_engine_id": null,
        "remote_block_ids": null,
        "remote_host": null,
        "remote_port": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_null_or_false_params_make_a_whole_request() {
        assert_eq!(Leg::of(None), Ok(Leg::Whole));
        assert_eq!(Leg::of(Some(&Value::Null)), Ok(Leg::Whole));
        assert_eq!(Leg::of(Some(&json!({"do_remote_decode": false}))), Ok(Leg::Whole));
        assert!(Leg::of(Some(&json!("yes"))).is_err());
    }

    #[test]
    fn the_proxy_s_prefill_request_makes_a_prefill_leg() {
        assert_eq!(Leg::of(Some(&prefill_request())), Ok(Leg::Prefill));
    }

    #[test]
    fn a_prefill_answer_makes_a_decode_leg() {
        let source = PrefillSource { engine_id: "10.0.0.7:8000", host: "10.0.0.7", port: 8000 };
        let answer = prefill_answer(&source, "chatcmpl-1f", &[4, 5, 6]);
        assert_eq!(answer["remote_block_ids"], json!([4, 5, 6]));
        assert_eq!(answer["tp_size"], 1);
        let expected = RemoteKv { host: "10.0.0.7".into(), port: 8000, request_id: "chatcmpl-1f".into() };
        assert_eq!(Leg::of(Some(&answer)), Ok(Leg::Decode(expected)));
    }

    #[test]
    fn a_decode_leg_without_where_to_fetch_from_is_refused_by_name() {
        let full = json!({"do_remote_prefill": true, "remote_host": "h", "remote_port": 9, "remote_request_id": "r"});
        for (field, message) in
            [("remote_host", "remote_host"), ("remote_port", "remote_port"), ("remote_request_id", "remote_request_id")]
        {
            let mut params = full.clone();
            params.as_object_mut().unwrap().remove(field);
            assert!(Leg::of(Some(&params)).unwrap_err().contains(message), "{field}");
        }
        let mut params = full.clone();
        params["remote_port"] = json!(70_000);
        assert!(Leg::of(Some(&params)).is_err(), "not a port");
        params["remote_port"] = json!(9);
        params["do_remote_decode"] = json!(true);
        assert!(Leg::of(Some(&params)).unwrap_err().contains("both"));
    }

    #[test]
    fn roles_refuse_the_leg_they_do_not_serve() {
        let decode = Leg::Decode(RemoteKv { host: "h".into(), port: 1, request_id: "r".into() });
        assert!(KvRole::Consumer.admit(&Leg::Prefill).is_err());
        assert!(KvRole::Consumer.admit(&decode).is_ok());
        assert!(KvRole::Producer.admit(&decode).is_err());
        assert!(KvRole::Producer.admit(&Leg::Prefill).is_ok());
        for role in [KvRole::Producer, KvRole::Consumer, KvRole::Both] {
            assert!(role.admit(&Leg::Whole).is_ok());
        }
        assert!(KvRole::Both.admit(&decode).is_ok() && KvRole::Both.admit(&Leg::Prefill).is_ok());
    }

    #[test]
    fn a_transfer_takes_its_bytes_over_the_bandwidth() {
        // 10,000 tokens × 128 KiB = 1.31 GB over 25 GB/s: 52.4 ms.
        let settings = PdSettings::default();
        assert!((settings.transfer_seconds(10_000) - 0.052_428_8).abs() < 1e-9);
    }

    #[test]
    fn pod_overrides_set_the_pd_settings_and_leave_other_keys() {
        let mut settings = PdSettings::default();
        assert_eq!(settings.set("kv_role", "kv_producer"), Some(Ok(())));
        assert_eq!(settings.role, KvRole::Producer);
        assert_eq!(settings.set("kv_transfer_gb_per_s", "5"), Some(Ok(())));
        assert_eq!(settings.transfer_gb_per_s, 5.0);
        assert_eq!(settings.set("pd_sidecar", "true"), Some(Ok(())));
        assert!(settings.sidecar);
        assert!(matches!(settings.set("kv_role", "decode"), Some(Err(_))));
        assert!(matches!(settings.set("kv_bytes_per_token", "1.5"), Some(Err(_))));
        assert_eq!(settings.set("num_gpu_blocks", "5"), None);
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(authority("::1", 80), "[::1]:80");
        assert_eq!(authority("10.0.0.1", 80), "10.0.0.1:80");
    }
}
