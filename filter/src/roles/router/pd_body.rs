//! The bodies of a split request in gateway mode, from the client's: the prefill leg's
//! (vLLM's `kv_transfer_params` protocol: `do_remote_decode`, one output token, not
//! streamed) and the decode leg's (the client's body with the `kv_transfer_params` the
//! prefill pod returned). A body that does not fit is a [`Fallback`]: the request is
//! then served whole.

use serde_json::{Map, Value, json};

use super::split::Fallback;

/// The field of vLLM's KV-transfer protocol, in requests and in answers.
const KV_TRANSFER_PARAMS: &str = "kv_transfer_params";

/// The prefill leg's body for the client's `client` body, and whether the client's
/// body carried its own `kv_transfer_params` (replaced in the decode leg's).
pub fn prefill_body(client: &[u8]) -> Result<(Vec<u8>, bool), Fallback> {
    let mut body: Map<String, Value> = serde_json::from_slice(client).map_err(|_| Fallback::Body)?;
    let had_params = body.contains_key(KV_TRANSFER_PARAMS);
    body.insert("max_tokens".into(), json!(1));
    for only_if_present in ["max_completion_tokens", "min_tokens"] {
        if let Some(value) = body.get_mut(only_if_present) {
            *value = json!(1);
        }
    }
    body.insert("stream".into(), json!(false));
    body.remove("stream_options");
    body.insert(
        KV_TRANSFER_PARAMS.into(),
        json!({
            "do_remote_decode": true,
            "do_remote_prefill": false,
            "remote_engine_id": null,
            "remote_block_ids": null,
            "remote_host": null,
            "remote_port": null,
        }),
    );
    let bytes = serde_json::to_vec(&body).map_err(|_| Fallback::Body)?;
    Ok((bytes, had_params))
}

/// The `kv_transfer_params` object of a prefill pod's answer, as JSON text.
pub fn answered_params(answer: &[u8]) -> Result<String, Fallback> {
    let answer: Map<String, Value> = serde_json::from_slice(answer).map_err(|_| Fallback::BadJson)?;
    match answer.get(KV_TRANSFER_PARAMS) {
        Some(params @ Value::Object(_)) => Ok(params.to_string()),
        _ => Err(Fallback::NoParams),
    }
}

/// The decode leg's body: the client's, with `params` as its `kv_transfer_params`.
/// Without a client copy to replace, the field goes in first and every other byte of
/// the client's body is kept as it came (numbers, key order, spacing).
pub fn decode_body(client: &[u8], params: &str, client_had_params: bool) -> Result<Vec<u8>, Fallback> {
    if client_had_params {
        let mut body: Map<String, Value> = serde_json::from_slice(client).map_err(|_| Fallback::Body)?;
        let params: Value = serde_json::from_str(params).map_err(|_| Fallback::Body)?;
        body.insert(KV_TRANSFER_PARAMS.into(), params);
        return serde_json::to_vec(&body).map_err(|_| Fallback::Body);
    }
    let open = client.iter().position(|b| !b.is_ascii_whitespace()).filter(|&i| client.get(i) == Some(&b'{'));
    let Some(open) = open else { return Err(Fallback::Body) };
    let (head, rest) = client.split_at(open + 1);
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    let field = format!("\"{KV_TRANSFER_PARAMS}\":{params}{}", if empty { "" } else { "," });
    Ok([head, field.as_bytes(), rest].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap_or(Value::Null)
    }

    #[test]
    fn the_prefill_leg_asks_for_one_token_unstreamed_with_remote_decode() {
        let client = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
            "stream_options":{"include_usage":true},"max_tokens":200,"max_completion_tokens":200,
            "min_tokens":10,"temperature":0.7}"#;
        let (body, had) = prefill_body(client).unwrap_or_default();
        let body = parse(&body);
        assert!(!had);
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["max_completion_tokens"], 1);
        assert_eq!(body["min_tokens"], 1);
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["temperature"], 0.7);
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(
            body["kv_transfer_params"],
            json!({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
                   "remote_block_ids": null, "remote_host": null, "remote_port": null})
        );
    }

    #[test]
    fn fields_the_client_did_not_send_are_not_added() {
        let (body, _) = prefill_body(br#"{"model":"m","prompt":"hi"}"#).unwrap_or_default();
        let body = parse(&body);
        assert!(body.get("max_completion_tokens").is_none());
        assert!(body.get("min_tokens").is_none());
        assert_eq!(body["max_tokens"], 1);
    }

    #[test]
    fn a_body_that_is_not_a_json_object_is_not_split() {
        for client in [&b"[1,2]"[..], b"not json", b""] {
            assert_eq!(prefill_body(client).err(), Some(Fallback::Body), "{client:?}");
        }
    }

    #[test]
    fn the_answers_params_must_be_an_object() {
        let ok = br#"{"id":"x","choices":[],"kv_transfer_params":{"do_remote_prefill":true,"remote_port":5600}}"#;
        assert_eq!(answered_params(ok).ok().map(|p| parse(p.as_bytes())["remote_port"].clone()), Some(json!(5600)));
        assert_eq!(answered_params(b"{oops").err(), Some(Fallback::BadJson));
        assert_eq!(answered_params(br#"{"choices":[]}"#).err(), Some(Fallback::NoParams));
        assert_eq!(answered_params(br#"{"kv_transfer_params":null}"#).err(), Some(Fallback::NoParams));
        assert_eq!(answered_params(br#"{"kv_transfer_params":[1]}"#).err(), Some(Fallback::NoParams));
    }

    #[test]
    fn the_decode_body_keeps_the_clients_bytes_and_adds_the_params() {
        let client = br#"  { "model": "m", "temperature": 1.10, "seed": 18446744073709551615, "stream": true }"#;
        let params = r#"{"do_remote_prefill":true,"remote_host":"10.0.0.7"}"#;
        let body = decode_body(client, params, false).unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        // Every byte of the client's is still there, in order, after the new field.
        assert!(
            text.ends_with(r#" "model": "m", "temperature": 1.10, "seed": 18446744073709551615, "stream": true }"#)
        );
        let parsed = parse(&body);
        assert_eq!(parsed["kv_transfer_params"]["remote_host"], "10.0.0.7");
        assert_eq!(parsed["stream"], true);
        assert_eq!(
            parse(&decode_body(b"{}", params, false).unwrap_or_default())["kv_transfer_params"]["remote_host"],
            "10.0.0.7"
        );
    }

    #[test]
    fn a_clients_own_params_are_replaced() {
        let client = br#"{"model":"m","kv_transfer_params":{"do_remote_decode":true}}"#;
        let body = parse(&decode_body(client, r#"{"do_remote_prefill":true}"#, true).unwrap_or_default());
        assert_eq!(body["kv_transfer_params"], json!({"do_remote_prefill": true}));
        assert_eq!(body["model"], "m");
    }
}
