//! LoRA adapter residency: at most `max_loras` adapters on the GPU; loading one takes
//! `lora_load_ms`; when full, the least recently used adapter that no running request
//! uses is evicted.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Virtual time when the adapter is usable (in the future while it loads).
    ready_at: f64,
    last_used: f64,
    in_use: u32,
}

/// Whether a request's adapter lets it run now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Residency {
    Ready,
    /// Loading; usable at this time.
    LoadingUntil(f64),
    /// No slot can be freed: every resident adapter is in use.
    NoSlot,
}

#[derive(Debug, Clone)]
pub struct LoraSlots {
    max_loras: usize,
    load_s: f64,
    slots: HashMap<String, Slot>,
    loads: u64,
}

impl LoraSlots {
    pub fn new(max_loras: u32, load_ms: f64) -> Self {
        Self { max_loras: max_loras as usize, load_s: load_ms / 1000.0, slots: HashMap::new(), loads: 0 }
    }

    /// Makes `adapter` resident if it can be (starting a load, evicting the LRU idle
    /// adapter if needed) and says whether a request may use it at `now`.
    pub fn acquire_residency(&mut self, adapter: &str, now: f64) -> Residency {
        if let Some(slot) = self.slots.get(adapter) {
            return if slot.ready_at <= now { Residency::Ready } else { Residency::LoadingUntil(slot.ready_at) };
        }
        if self.slots.len() >= self.max_loras {
            let victim = self
                .slots
                .iter()
                .filter(|(_, s)| s.in_use == 0 && s.ready_at <= now)
                .min_by(|a, b| a.1.last_used.total_cmp(&b.1.last_used).then_with(|| a.0.cmp(b.0)))
                .map(|(name, _)| name.clone());
            match victim {
                Some(name) => {
                    self.slots.remove(&name);
                }
                None => return Residency::NoSlot,
            }
        }
        let ready_at = now + self.load_s;
        self.loads += 1;
        self.slots.insert(adapter.to_string(), Slot { ready_at, last_used: now, in_use: 0 });
        if self.load_s <= 0.0 { Residency::Ready } else { Residency::LoadingUntil(ready_at) }
    }

    pub fn start_using(&mut self, adapter: &str, now: f64) {
        if let Some(slot) = self.slots.get_mut(adapter) {
            slot.in_use += 1;
            slot.last_used = now;
        }
    }

    pub fn stop_using(&mut self, adapter: &str, now: f64) {
        if let Some(slot) = self.slots.get_mut(adapter) {
            slot.in_use = slot.in_use.saturating_sub(1);
            slot.last_used = now;
        }
    }

    /// Adapters resident and loaded, and those still loading, for `/metrics`.
    pub fn resident(&self, now: f64) -> (Vec<String>, Vec<String>) {
        let mut ready: Vec<String> = Vec::new();
        let mut loading: Vec<String> = Vec::new();
        for (name, slot) in &self.slots {
            if slot.ready_at <= now {
                ready.push(name.clone());
            } else {
                loading.push(name.clone());
            }
        }
        ready.sort();
        loading.sort();
        (ready, loading)
    }

    /// Adapter loads so far (each one a swap when the slots were full).
    pub fn loads(&self) -> u64 {
        self.loads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_adapter_pays_the_load_time() {
        let mut slots = LoraSlots::new(2, 100.0);
        assert_eq!(slots.acquire_residency("a", 0.0), Residency::LoadingUntil(0.1));
        assert_eq!(slots.acquire_residency("a", 0.05), Residency::LoadingUntil(0.1));
        assert_eq!(slots.acquire_residency("a", 0.1), Residency::Ready);
    }

    #[test]
    fn a_full_set_evicts_the_least_recently_used_idle_adapter() {
        let mut slots = LoraSlots::new(2, 0.0);
        slots.acquire_residency("a", 0.0);
        slots.acquire_residency("b", 1.0);
        slots.start_using("a", 2.0);
        slots.stop_using("a", 3.0);
        assert_eq!(slots.acquire_residency("c", 4.0), Residency::Ready);
        let (ready, _) = slots.resident(4.0);
        assert_eq!(ready, ["a", "c"], "b was least recently used");
        assert_eq!(slots.loads(), 3);
    }

    #[test]
    fn adapters_in_use_are_never_evicted() {
        let mut slots = LoraSlots::new(1, 0.0);
        slots.acquire_residency("a", 0.0);
        slots.start_using("a", 0.0);
        assert_eq!(slots.acquire_residency("b", 1.0), Residency::NoSlot);
    }
}
