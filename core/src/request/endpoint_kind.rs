//! Which OpenAI API a request path names.

/// The API surfaces the gateway handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiEndpoint {
    /// A POST whose body names a model: chat, completions, embeddings.
    Inference,
    /// `GET /v1/models`, answered by the gateway from its config.
    ListModels,
    Unknown,
}

const INFERENCE_PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

/// Classifies by method and path; the query string is ignored.
pub fn classify(method: &str, path: &str) -> ApiEndpoint {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let path = path.strip_suffix('/').unwrap_or(path);
    match method {
        "POST" if INFERENCE_PATHS.contains(&path) => ApiEndpoint::Inference,
        "GET" if path == "/v1/models" => ApiEndpoint::ListModels,
        _ => ApiEndpoint::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        assert_eq!(classify("POST", "/v1/chat/completions"), ApiEndpoint::Inference);
        assert_eq!(classify("POST", "/v1/completions?x=1"), ApiEndpoint::Inference);
        assert_eq!(classify("GET", "/v1/models"), ApiEndpoint::ListModels);
        assert_eq!(classify("GET", "/v1/chat/completions"), ApiEndpoint::Unknown);
        assert_eq!(classify("POST", "/admin"), ApiEndpoint::Unknown);
    }
}
