//! Admission of a snapshot push on the control listener: who may push, and what.

use subtle::ConstantTimeEq;

/// Checks an `authorization` header against the expected bearer token in constant
/// time, so that response timing says nothing about how much of a guess was right.
pub fn bearer_token_matches(authorization: Option<&str>, expected_token: &str) -> bool {
    let Some(presented) = authorization.and_then(|value| value.strip_prefix("Bearer ")) else {
        return false;
    };
    !expected_token.is_empty() && bool::from(presented.trim().as_bytes().ct_eq(expected_token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_the_exact_token() {
        assert!(bearer_token_matches(Some("Bearer s3cret"), "s3cret"));
        assert!(!bearer_token_matches(Some("Bearer s3cre"), "s3cret"));
        assert!(!bearer_token_matches(Some("s3cret"), "s3cret"));
        assert!(!bearer_token_matches(None, "s3cret"));
        assert!(!bearer_token_matches(Some("Bearer "), ""), "an empty token never authorizes");
    }
}
