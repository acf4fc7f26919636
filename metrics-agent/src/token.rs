//! The bearer token shared with Envoy's control listener. It is read from a file or an
//! environment variable and is never printed: `Debug` and `Display` redact it.

use std::fmt;
use std::path::Path;

#[derive(Clone)]
pub struct ControlToken(String);

impl ControlToken {
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        Self::new(&text).ok_or_else(|| format!("the token file {} is empty", path.display()))
    }

    pub fn new(value: &str) -> Option<Self> {
        let value = value.trim();
        (!value.is_empty()).then(|| Self(value.to_string()))
    }

    pub fn bearer_header(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControlToken(<redacted>)")
    }
}

impl fmt::Display for ControlToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_secret() {
        let token = ControlToken::new(" s3cret\n").unwrap();
        assert!(!format!("{token:?} {token}").contains("s3cret"));
        assert_eq!(token.bearer_header(), "Bearer s3cret");
        assert!(ControlToken::new("  ").is_none());
    }
}
