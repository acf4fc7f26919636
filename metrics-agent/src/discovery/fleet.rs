//! The set of pods to scrape: each pool's static endpoints plus those discovered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use infergate_core::Endpoint;
use infergate_core::config::{Engine, InfergateConfig, PodRole};

/// The pods one discovery source currently reports for a pool, with the role each
/// pod's label gives it (`both` without a label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEndpoints {
    pub pool: String,
    pub endpoints: BTreeMap<Endpoint, PodRole>,
}

/// One pod to scrape, and where it goes in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub pool_index: usize,
    pub endpoint: Endpoint,
    pub engine: Engine,
    /// What the pod does in a disaggregated pool: from the pool's static lists, or the
    /// discovered pod's role label.
    pub role: PodRole,
}

/// The current config and the pods discovered for its pools.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub config: Arc<InfergateConfig>,
    pub discovered: BTreeMap<String, BTreeMap<Endpoint, PodRole>>,
}

impl Fleet {
    pub fn new(config: Arc<InfergateConfig>) -> Self {
        Self { config, discovered: BTreeMap::new() }
    }

    /// Every pod of every pool, static endpoints first, each once per pool.
    pub fn targets(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        for (pool_index, pool) in self.config.pools.iter().enumerate() {
            let statics = pool.endpoints.iter().map(|&endpoint| (endpoint, pool.role_of(endpoint)));
            let discovered = self.discovered.get(&pool.name).into_iter().flatten().map(|(&e, &role)| (e, role));
            let mut seen = BTreeSet::new();
            for (endpoint, role) in statics.chain(discovered) {
                if seen.insert(endpoint) {
                    targets.push(Target { pool_index, endpoint, engine: pool.engine, role });
                }
            }
        }
        targets
    }

    /// Records a discovery update; true if the pod set changed.
    pub fn apply(&mut self, update: PoolEndpoints) -> bool {
        if update.endpoints.is_empty() {
            return self.discovered.remove(&update.pool).is_some();
        }
        if self.discovered.get(&update.pool) == Some(&update.endpoints) {
            return false;
        }
        self.discovered.insert(update.pool, update.endpoints);
        true
    }

    /// Replaces the config; pods discovered for pools that no longer use discovery
    /// are forgotten.
    pub fn set_config(&mut self, config: Arc<InfergateConfig>) {
        self.discovered.retain(|name, _| config.pools.iter().any(|p| &p.name == name && p.discovery.is_some()));
        self.config = config;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Arc<InfergateConfig> {
        Arc::new(InfergateConfig::from_yaml_str(yaml, "test.yaml").unwrap())
    }

    const TWO_POOLS: &str = r#"
version: 1
pools:
  - name: a
    endpoints: ["10.0.0.1:8000"]
  - name: b
    discovery: {pods: {match_labels: {app: b}, target_ports: [8000]}}
models:
  - {name: m, pool: a}
"#;

    #[test]
    fn targets_join_static_and_discovered_pods_without_duplicates() {
        let mut fleet = Fleet::new(config(TWO_POOLS));
        let ep = |s: &str| s.parse::<Endpoint>().unwrap();
        assert!(
            fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: [(ep("10.0.1.1:8000"), PodRole::Both)].into() })
        );
        assert!(
            !fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: [(ep("10.0.1.1:8000"), PodRole::Both)].into() })
        );
        assert!(
            fleet.apply(PoolEndpoints { pool: "a".into(), endpoints: [(ep("10.0.0.1:8000"), PodRole::Both)].into() })
        );
        let targets = fleet.targets();
        let listed: Vec<(usize, String)> = targets.iter().map(|t| (t.pool_index, t.endpoint.to_string())).collect();
        assert_eq!(listed, vec![(0, "10.0.0.1:8000".into()), (1, "10.0.1.1:8000".into())]);
        // Pool a has no discovery source: its discovered pods are dropped with a new config.
        fleet.set_config(config(TWO_POOLS));
        assert!(!fleet.discovered.contains_key("a"));
        assert!(fleet.discovered.contains_key("b"));
        assert!(fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: BTreeMap::new() }));
        assert_eq!(fleet.targets().len(), 1);
    }

    #[test]
    fn targets_carry_each_pods_role() {
        let yaml = r#"
version: 1
pools:
  - name: a
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
    disaggregation: {prefill_endpoints: ["10.0.0.2:8000"]}
  - name: b
    discovery: {pods: {match_labels: {app: b}, target_ports: [8000]}}
    disaggregation: {}
models:
  - {name: m, pool: a}
"#;
        let mut fleet = Fleet::new(config(yaml));
        let ep = |s: &str| s.parse::<Endpoint>().unwrap();
        let discovered = [(ep("10.0.1.1:8000"), PodRole::Decode), (ep("10.0.1.2:8000"), PodRole::Both)];
        assert!(fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: discovered.into() }));
        let roles: Vec<(String, PodRole)> = fleet.targets().iter().map(|t| (t.endpoint.to_string(), t.role)).collect();
        assert_eq!(
            roles,
            vec![
                ("10.0.0.1:8000".into(), PodRole::Both),
                ("10.0.0.2:8000".into(), PodRole::Prefill),
                ("10.0.1.1:8000".into(), PodRole::Decode),
                ("10.0.1.2:8000".into(), PodRole::Both),
            ]
        );
    }
}
