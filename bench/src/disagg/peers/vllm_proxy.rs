//! vLLM's P/D proxy (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`, the
//! version the index holds at `030ea52e`): every request is split; the prefill pod and
//! the decode pod each come from their own round robin (`itertools.cycle` over the
//! prefill URLs and over the decode URLs), with no load, prefix or health awareness.

use crate::disagg::policy::{PdChoice, PdContext, PdPolicy, decode_pods, prefill_pods};

#[derive(Default)]
pub struct VllmProxy {
    next_prefill: usize,
    next_decode: usize,
}

impl PdPolicy for VllmProxy {
    fn name(&self) -> String {
        "pd/vllm_proxy".into()
    }

    fn route(&mut self, ctx: &PdContext<'_>) -> PdChoice {
        let (prefills, decodes) = (prefill_pods(ctx.roles), decode_pods(ctx.roles));
        let prefill = prefills.get(self.next_prefill % prefills.len().max(1)).copied();
        let decode = decodes.get(self.next_decode % decodes.len().max(1)).copied().unwrap_or(0);
        self.next_prefill += 1;
        self.next_decode += 1;
        PdChoice { decode, prefill: prefill.filter(|&p| p != decode) }
    }
}
