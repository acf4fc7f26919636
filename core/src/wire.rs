//! Every name two roles or two processes agree on, defined once: the headers the
//! gateway sets and honours, the keys of Envoy's shared data, the shared queues, the
//! control and usage paths, Envoy cluster names that the filter calls, and the
//! characters-per-token estimate every component uses when it has no tokenizer.
//!
//! The filter, the Envoy config renderer, the agent, the rate limit service,
//! model-sim, the bench and the tests all import these; a rename is one edit.

/// HTTP headers.
pub mod header {
    /// The pod (or ordered list of pods) the `override_host` cluster routes to: the
    /// Gateway API Inference Extension's name.
    pub const ENDPOINT: &str = "x-gateway-destination-endpoint";
    /// The model the request names, for the route and the access log.
    pub const MODEL: &str = "x-gateway-model-name";
    /// The route match key: which pool's cluster serves the request.
    pub const POOL: &str = "x-infergate-pool";
    /// The decision explained, on responses when `explain` is on.
    pub const DECISION: &str = "x-infergate-decision";
    /// A client may lower its request's criticality (`sheddable`) with this header.
    pub const CRITICALITY: &str = "x-infergate-criticality";
    /// A client's request class on the global router (`latency` or `batch`).
    pub const CLASS: &str = "x-infergate-class";
    /// The verified tenant: Envoy's `jwt_authn` copies the configured claim of a valid
    /// token into it, after the rendered config removed the client's copy.
    pub const IDENTITY: &str = "x-infergate-identity";
    /// The hashed tenant the global router sets; Envoy's rate limit actions read it.
    pub const TENANT: &str = "x-infergate-tenant";
    /// The prompt tokens charged at admission by the global router.
    pub const PROMPT_TOKENS: &str = "x-infergate-prompt-tokens";
    /// On a snapshot push: how many gateway replicas the agent pushes to. Above one,
    /// the control listener answers with this replica's digest for the others.
    pub const REPLICAS: &str = "x-infergate-replicas";
    /// A client's TTFT target for its request, in milliseconds: under flow control its
    /// deadline in the gateway queue (earliest deadline first).
    pub const TTFT_TARGET_MS: &str = "x-infergate-ttft-target-ms";
    /// On a refusal by the gateway queue: why (`queue_full`, `displaced`, `expired`).
    pub const QUEUE_REASON: &str = "x-infergate-queue-reason";
    /// The pod that answered, set by model-sim on every response.
    pub const SERVED_BY: &str = "x-infergate-served-by";
    /// A split request's prefill pod, `ip:port`, on the request to its decode pod, for
    /// llm-d's routing sidecar there, which runs the prefill leg (llm-d's name).
    pub const PREFILLER_HOST_PORT: &str = "x-prefiller-host-port";
    /// Headers only the gateway may set: a client's copies (names starting with one of
    /// these) are removed before routing.
    pub const RESERVED_PREFIXES: [&str; 3] = ["x-gateway-", "x-infergate-", PREFILLER_HOST_PORT];
}

/// Keys of Envoy's shared data, one namespace per process.
pub mod shared_data {
    /// The latest snapshot bytes.
    pub const SNAPSHOT: &str = "infergate.snapshot";
    /// The snapshot generation (8 bytes, little endian), read per request.
    pub const GENERATION: &str = "infergate.generation";
    /// The highest snapshot sequence admitted: a push at or below it is a replay.
    pub const SEQUENCE: &str = "infergate.sequence";
    /// Bumped whenever a cluster summary is stored (8 bytes, little endian).
    pub const SUMMARY_GENERATION: &str = "infergate.summary-generation";
    /// Prefix of a cluster's newest summary: `infergate.summary.<cluster>`.
    pub const SUMMARY_PREFIX: &str = "infergate.summary.";
    /// Every pod's load as this Envoy counted it, updated with compare-and-swap by every
    /// worker: for each pod with load, in address order, 4 or 6, the address's bytes,
    /// the port (u16), the in-flight count (u32) and the pending prefill tokens (u64),
    /// little endian (`filter::shared::pod_loads`).
    pub const POD_LOADS: &str = "infergate.pod-loads";
    /// Prefix of the requests the global router sent a cluster since its newest
    /// summary, counted by every worker: `infergate.backlog.<cluster>`, 16 bytes, that
    /// summary's sequence then the count, each a little-endian u64.
    pub const BACKLOG_PREFIX: &str = "infergate.backlog.";
    /// Prefix of a pool's gateway queue, updated with compare-and-swap by every
    /// worker: `infergate.flow.<pool>`, a MessagePack `flow::FlowQueue`.
    pub const FLOW_PREFIX: &str = "infergate.flow.";
    /// The router workers' prefix queues, one name per line.
    pub const PREFIX_PEERS: &str = "infergate.prefix-peers";
    /// The other replicas' load, as the agent last pushed it between snapshots: 8 bytes
    /// of arrival time (Unix ms, little endian), then a MessagePack
    /// `replicas::ReplicaLoad`. Read by a router worker when its generation moved.
    pub const PEER_LOAD: &str = "infergate.peer-load";
    /// Bumped whenever a load push is stored (8 bytes, little endian), read per request.
    pub const PEER_LOAD_GENERATION: &str = "infergate.peer-load-generation";
    /// The pods of the newest snapshot a replicated push brought, one `ip:port` per
    /// line: the control listener reports this replica's load on them.
    pub const REPLICA_PODS: &str = "infergate.replica-pods";
    /// When the control listener last drained the outbox (8 bytes, little-endian Unix
    /// ms): routers stop filling it when no agent has asked for a while.
    pub const OUTBOX_DRAINED_AT: &str = "infergate.outbox-drained-at";
    /// The replica's newest prefix records, its workers' and those the control listener
    /// relayed from the other replicas: the number of batches kept (8 bytes,
    /// little-endian), and each batch in a ring under `infergate.recent-prefixes.<slot>`.
    /// A router worker applies them when it joins the prefix peers at its first
    /// request, since records sent before then reached no queue of its.
    pub const RECENT_PREFIXES: &str = "infergate.recent-prefixes";
}

/// Envoy shared queues, named under the plugins' common `vm_id`.
pub mod queue {
    /// Carries snapshots from the control role to the singleton.
    pub const SNAPSHOTS: &str = "infergate.snapshots";
    /// Prefix of each router worker's queue of prefix records from the others.
    pub const PREFIX_PREFIX: &str = "infergate.prefix.";
    /// The replica's prefix records for the other replicas: listed among the prefix
    /// queues, so every router worker sends there, and drained by the control listener
    /// into its answer to each snapshot push.
    pub const OUTBOX: &str = "infergate.prefix.outbox";
}

/// HTTP paths between processes.
pub mod path {
    /// The control listener takes snapshot pushes here.
    pub const SNAPSHOT: &str = "/v1/snapshot";
    /// The control listener takes the other replicas' load here, between snapshots,
    /// and answers with its own (`replicas::ReplicaLoad`).
    pub const LOAD: &str = "/v1/load";
    /// The control listener takes cluster summaries here (the global router's).
    pub const SUMMARY: &str = "/v1/summary";
    /// The rate limit service takes usage reports here.
    pub const USAGE: &str = "/v1/usage";
    /// An engine's OpenAI model list, base models and LoRA adapters, which the agent
    /// reads to know which adapters each pod serves.
    pub const MODELS: &str = "/v1/models";
}

/// Envoy clusters the rendered config defines and the filter or Envoy calls by name.
pub mod cluster {
    /// The rate limit service's gRPC cluster in the global router's bootstrap.
    pub const RATE_LIMIT: &str = "infergate-ratelimit";
    /// The rate limit service's HTTP cluster that takes usage reports.
    pub const USAGE: &str = "infergate-ratelimit-usage";
    /// `infergate-epp`'s gRPC cluster, when Envoy routes through ext_proc.
    pub const EPP: &str = "infergate-epp";
    /// Prefix of a pool's cluster, `pool-<name>`: the routes send the pool's requests
    /// there, and the filter a split request's prefill leg.
    pub const POOL_PREFIX: &str = "pool-";

    /// The cluster of the pool `name`.
    pub fn pool(name: &str) -> String {
        format!("{POOL_PREFIX}{name}")
    }
}

/// Envoy stats the filter defines (`wasmcustom.<name>` in `/stats`) that tests and
/// docs read by name.
pub mod stat {
    /// Requests of a disaggregated pool that the decision split into a prefill leg and
    /// a decode leg.
    pub const PD_SPLIT: &str = "infergate.pd.split";
    /// Requests of a disaggregated pool that the decision served whole on one pod.
    pub const PD_WHOLE: &str = "infergate.pd.whole";
    /// Prefill legs the gateway sent that came back with `kv_transfer_params`.
    pub const PD_PREFILL_OK: &str = "infergate.pd.prefill.ok";
    /// The gateway's prefill legs, from dispatch to answer, in ms (a histogram).
    pub const PD_PREFILL_MS: &str = "infergate.pd.prefill_ms";
    /// Prefix of the split requests served whole on their decode pod because their
    /// prefill leg failed: `infergate.pd.fallback.<reason>`.
    pub const PD_FALLBACK_PREFIX: &str = "infergate.pd.fallback.";
}

/// The Gateway API Inference Extension's endpoint picker protocol (its proposal 004):
/// the dynamic metadata through which Envoy and an ext_proc picker exchange endpoints.
pub mod epp {
    /// The namespace of the picked endpoints, and of the endpoint that served.
    pub const LB_NAMESPACE: &str = "envoy.lb";
    /// The picked endpoints under [`LB_NAMESPACE`]: `ip:port,ip:port,...`, best first
    /// (the value of the `x-gateway-destination-endpoint` header).
    pub const DESTINATION_KEY: &str = super::header::ENDPOINT;
    /// The endpoint that served, under [`LB_NAMESPACE`], reported back by the proxy.
    pub const SERVED_KEY: &str = "x-gateway-destination-endpoint-served";
    /// The namespace of the proxy's subset hint.
    pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
    /// The endpoints the picker may choose from, a list, under [`SUBSET_NAMESPACE`].
    pub const SUBSET_KEY: &str = "x-gateway-destination-endpoint-subset";
    /// gRPC health service names: the process is up; it can pick (it has a snapshot).
    pub const HEALTH_LIVENESS: &str = "liveness";
    pub const HEALTH_READINESS: &str = "readiness";
    /// gRPC health service: the picker takes new streams. Serving from start until it
    /// is told to stop; Envoy health-checks it when several pickers serve one gateway,
    /// so a draining picker gets no new request before it exits.
    pub const HEALTH_STREAMS: &str = "infergate.epp.streams";
}

/// Characters per token when no tokenizer is at hand: the gateway's prompt-length
/// estimate, model-sim's tokenizer and the bench's workloads all count this way.
pub const CHARS_PER_TOKEN: usize = 4;
