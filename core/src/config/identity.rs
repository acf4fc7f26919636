//! Who is asking: where a request's tenant comes from. Flow control shares the queue
//! fairly between tenants, so the tenant must come from a source the operator trusts:
//! a claim of a token Envoy's `jwt_authn` filter verified, or a header a trusted filter
//! sets. A client header is accepted too, but only as what it is: the client's word.

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, FieldPath};
use super::limits;
use crate::wire::header;

/// Where a request's tenant comes from, and whether a request must have one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::IDENTITY)))]
#[serde(deny_unknown_fields)]
pub struct IdentitySettings {
    /// Where the tenant comes from: `client-header` (a header the client sets: its
    /// word, not a proof), `trusted-header` (a header a filter before infergate sets,
    /// e.g. `ext_authz`; the client's own copy is removed first) or `jwt` (a claim of a
    /// token Envoy's `jwt_authn` verified).
    #[serde(default)]
    pub source: IdentitySource,
    /// The header holding the tenant, for `client-header` and `trusted-header`; unset,
    /// `flow_control.tenant_header`.
    #[cfg_attr(feature = "schema", schemars(example = &"x-tenant-id"))]
    #[serde(default)]
    pub header: Option<String>,
    /// For `jwt`: the tokens' issuer and keys. `infergate-envoy-config` renders Envoy's
    /// `jwt_authn` filter from it.
    #[serde(default)]
    pub jwt: Option<JwtSettings>,
    /// Refuse a request without an identity (no token, an expired one, a bad
    /// signature, or no header) with an OpenAI-shaped 401; otherwise such requests share
    /// one anonymous tenant.
    #[cfg_attr(feature = "schema", schemars(example = true))]
    #[serde(default)]
    pub required: bool,
}

/// Where a request's tenant comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum IdentitySource {
    /// A header the client sets: anyone can claim any tenant with it.
    #[default]
    ClientHeader,
    /// A header a filter placed before infergate sets; the rendered config removes
    /// the client's copy before any filter runs.
    TrustedHeader,
    /// A claim of a JSON Web Token that Envoy's `jwt_authn` filter verified.
    Jwt,
}

/// The tokens a `jwt` identity accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = limits::Annotate(limits::JWT)))]
#[serde(deny_unknown_fields)]
pub struct JwtSettings {
    /// The `iss` a token must carry.
    #[cfg_attr(feature = "schema", schemars(example = &"https://auth.example.com/"))]
    pub issuer: String,
    /// The `aud` values accepted; empty, any.
    #[cfg_attr(feature = "schema", schemars(example = serde_json::json!(["infergate"])))]
    #[serde(default)]
    pub audiences: Vec<String>,
    /// A JWKS file on the gateway's machine, read by Envoy at start. Give this or
    /// `jwks_uri`.
    #[cfg_attr(feature = "schema", schemars(example = &"/etc/infergate/jwks.json"))]
    #[serde(default)]
    pub jwks_file: Option<String>,
    /// An `http://` or `https://` URI Envoy fetches the JWKS from, and refreshes.
    #[cfg_attr(feature = "schema", schemars(example = &"https://auth.example.com/.well-known/jwks.json"))]
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// The claim that names the tenant.
    #[serde(default = "JwtSettings::default_claim")]
    pub claim: String,
}

impl JwtSettings {
    fn default_claim() -> String {
        "sub".to_string()
    }
}

/// What the router reads: the header holding the tenant once the filters before it
/// have run, and whether it may be missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSource {
    pub header: String,
    /// The header is set by a filter the operator trusts, not by the client.
    pub verified: bool,
    pub required: bool,
}

impl IdentitySettings {
    /// The header the router reads the tenant from, given flow control's own.
    pub fn tenant_source(&self, flow_tenant_header: &str) -> TenantSource {
        let header = match self.source {
            IdentitySource::Jwt => header::IDENTITY.to_string(),
            IdentitySource::ClientHeader | IdentitySource::TrustedHeader => {
                self.header.clone().unwrap_or_else(|| flow_tenant_header.to_string())
            }
        };
        TenantSource { header, verified: self.source != IdentitySource::ClientHeader, required: self.required }
    }

    pub(crate) fn validate(&self, at: &FieldPath) -> Result<(), ConfigError> {
        if let Some(name) = &self.header {
            if !limits::is_header_name(name) || name.starts_with("x-infergate-") {
                return Err(limits::IDENTITY_HEADER.error(at, format_args!("`{name}`")));
            }
        }
        match (self.source, &self.jwt) {
            (IdentitySource::Jwt, None) => {
                Err(ConfigError::at(&at.key("jwt"), "is required when `source` is `jwt`: the issuer and its keys"))
            }
            (IdentitySource::Jwt, Some(jwt)) => jwt.validate(&at.key("jwt")),
            (_, Some(_)) => Err(ConfigError::at(&at.key("jwt"), "is read only when `source` is `jwt`")),
            (_, None) => Ok(()),
        }
    }
}

impl JwtSettings {
    fn validate(&self, at: &FieldPath) -> Result<(), ConfigError> {
        if self.issuer.trim().is_empty() {
            return Err(limits::ISSUER.error(at, "an empty string"));
        }
        match (&self.jwks_file, &self.jwks_uri) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(ConfigError::at(&at.key("jwks_file"), "give exactly one of `jwks_file` and `jwks_uri`"));
            }
            (None, Some(uri)) if !(uri.starts_with("https://") || uri.starts_with("http://")) => {
                return Err(limits::JWKS_URI.error(at, format_args!("`{uri}`")));
            }
            _ => {}
        }
        if self.claim.trim().is_empty() {
            return Err(limits::CLAIM.error(at, "an empty string"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt() -> JwtSettings {
        JwtSettings {
            issuer: "https://auth.example.com/".into(),
            audiences: vec![],
            jwks_file: Some("/etc/jwks.json".into()),
            jwks_uri: None,
            claim: "sub".into(),
        }
    }

    #[test]
    fn each_source_names_the_header_the_router_reads() {
        let client = IdentitySettings::default().tenant_source("x-tenant-id");
        assert_eq!((client.header.as_str(), client.verified), ("x-tenant-id", false));
        let token = IdentitySettings { source: IdentitySource::Jwt, jwt: Some(jwt()), ..Default::default() };
        assert_eq!((token.tenant_source("x-tenant-id").header.as_str(), true), (header::IDENTITY, true));
        let trusted = IdentitySettings {
            source: IdentitySource::TrustedHeader,
            header: Some("x-auth-tenant".into()),
            ..Default::default()
        };
        assert_eq!(trusted.tenant_source("x-tenant-id").header, "x-auth-tenant");
    }

    #[test]
    fn a_jwt_identity_needs_its_issuer_and_exactly_one_key_source() {
        let at = FieldPath::root().key("identity");
        let settings =
            |jwt: Option<JwtSettings>| IdentitySettings { source: IdentitySource::Jwt, jwt, ..Default::default() };
        assert!(settings(Some(jwt())).validate(&at).is_ok());
        assert!(settings(None).validate(&at).is_err());
        let both = JwtSettings { jwks_uri: Some("https://auth.example.com/jwks".into()), ..jwt() };
        assert!(settings(Some(both)).validate(&at).is_err());
        let ftp = JwtSettings { jwks_file: None, jwks_uri: Some("ftp://x".into()), ..jwt() };
        assert!(settings(Some(ftp)).validate(&at).is_err());
        let reserved = IdentitySettings { header: Some("x-infergate-identity".into()), ..Default::default() };
        assert!(reserved.validate(&at).is_err());
    }
}
