//! The set of pods to scrape: each pool's static endpoints plus those discovered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use infergate_core::Endpoint;
use infergate_core::config::{Engine, InfergateConfig};

/// The pods one discovery source currently reports for a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEndpoints {
    pub pool: String,
    pub endpoints: BTreeSet<Endpoint>,
}

/// One pod to scrape, and where it goes in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub pool_index: usize,
    pub endpoint: Endpoint,
    pub engine: Engine,
}

/// The current config and the pods discovered for its pools.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub config: Arc<InfergateConfig>,
    pub discovered: BTreeMap<String, BTreeSet<Endpoint>>,
}

impl Fleet {
    pub fn new(config: Arc<InfergateConfig>) -> Self {
        Self { config, discovered: BTreeMap::new() }
    }

    /// Every pod of every pool, static endpoints first, each once per pool.
    pub fn targets(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        for (pool_index, pool) in self.config.pools.iter().enumerate() {
            let discovered = self.discovered.get(&pool.name).into_iter().flatten();
            let mut seen = BTreeSet::new();
            for &endpoint in pool.endpoints.iter().chain(discovered) {
                if seen.insert(endpoint) {
                    targets.push(Target { pool_index, endpoint, engine: pool.engine });
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
        assert!(fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: [ep("10.0.1.1:8000")].into() }));
        assert!(!fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: [ep("10.0.1.1:8000")].into() }));
        assert!(fleet.apply(PoolEndpoints { pool: "a".into(), endpoints: [ep("10.0.0.1:8000")].into() }));
        let targets = fleet.targets();
        let listed: Vec<(usize, String)> = targets.iter().map(|t| (t.pool_index, t.endpoint.to_string())).collect();
        assert_eq!(listed, vec![(0, "10.0.0.1:8000".into()), (1, "10.0.1.1:8000".into())]);
        // Pool a has no discovery source: its discovered pods are dropped with a new config.
        fleet.set_config(config(TWO_POOLS));
        assert!(!fleet.discovered.contains_key("a"));
        assert!(fleet.discovered.contains_key("b"));
        assert!(fleet.apply(PoolEndpoints { pool: "b".into(), endpoints: BTreeSet::new() }));
        assert_eq!(fleet.targets().len(), 1);
    }
}
