//! LoRA residency: running 1.0 (resident and in use), waiting 0.8 (being loaded),
//! free slot 0.6 (a load), a surplus copy 0.3 (running, but drained for an adapter
//! with no slot), duplicate 0.15 (a second copy where the pool has no slot to spare),
//! freeing 0.1 (every slot serves running requests, one of them a surplus copy's) and
//! blocked 0.05 (every slot serves running requests that keep coming, or is claimed by
//! a waiting adapter). The last is a cost, not a wall: unlike the peers' hard filter, a
//! blocked pod still wins when the others are far busier. Unknown state scores 0.5.

use super::{AdapterState, Candidate};

pub(super) fn value(state: AdapterState) -> f64 {
    match state {
        AdapterState::NotNeeded | AdapterState::Running => 1.0,
        AdapterState::Waiting => 0.8,
        AdapterState::FreeSlot => 0.6,
        AdapterState::Unknown => 0.5,
        AdapterState::Surplus => 0.3,
        AdapterState::Duplicate => 0.15,
        AdapterState::Freeing => 0.1,
        AdapterState::Blocked => 0.05,
    }
}

pub(super) fn score(candidates: &[Candidate], out: &mut [f64]) {
    for (slot, c) in out.iter_mut().zip(candidates) {
        *slot = value(c.adapter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_orders_the_scores() {
        let order = [
            AdapterState::Running,
            AdapterState::Waiting,
            AdapterState::FreeSlot,
            AdapterState::Surplus,
            AdapterState::Duplicate,
            AdapterState::Freeing,
            AdapterState::Blocked,
        ];
        let values: Vec<f64> = order.iter().map(|s| value(*s)).collect();
        assert!(values.windows(2).all(|w| w[0] > w[1]), "{values:?}");
        assert!(value(AdapterState::Blocked) > 0.0, "a blocked slot is a cost, not a filter");
    }
}
