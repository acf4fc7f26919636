//! A small OpenAI client for the tests.

use std::collections::HashMap;

use serde_json::{Value, json};

/// What a test looks at in a response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn served_by(&self) -> Option<&str> {
        self.header(infergate_core::wire::header::SERVED_BY)
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts the OpenAI error shape and returns `error.code`.
    pub fn error_code(&self) -> String {
        let body = self.json();
        let error = &body["error"];
        assert!(error["message"].is_string(), "not an OpenAI error body: {}", self.body);
        assert!(error["type"].is_string(), "not an OpenAI error body: {}", self.body);
        error["code"].as_str().unwrap_or_default().to_string()
    }
}

pub fn chat_body(model: &str, prompt: &str, max_tokens: u64) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens})
}

pub async fn read_reply(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let body = response.text().await.unwrap_or_default();
    Reply { status, headers, body }
}
