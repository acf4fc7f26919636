//! Loading `infergate.yaml` with errors that carry a line and column.
//!
//! Syntax and type errors get their position from the YAML parser. Semantic errors are
//! found after parsing, on typed values that have no positions; to point at their line
//! we parse the text a second time with a probe that stops at the failing field, so the
//! parser reports where that field is.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::InfergateConfig;
use super::error::{ConfigError, Location};

const PROBE_HIT: &str = "infergate-config-probe-hit";

/// A config file type: parsed by serde, then checked by its own `validate`.
pub(crate) trait ValidatedFile: serde::de::DeserializeOwned {
    fn check(&self) -> Result<(), ConfigError>;
}

impl ValidatedFile for InfergateConfig {
    fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

/// Parses and validates; `source_name` (usually the file path) prefixes errors.
pub(crate) fn from_yaml_str<T: ValidatedFile>(text: &str, source_name: &str) -> Result<T, ConfigError> {
    let config: T = serde_yaml_ng::from_str(text).map_err(|err| ConfigError {
        source_name: Some(source_name.to_string()),
        location: err.location().map(|l| Location { line: l.line(), column: l.column() }),
        path: String::new(),
        message: err.to_string(),
    })?;
    config.check().map_err(|mut err| {
        err.source_name = Some(source_name.to_string());
        err.location = locate(text, &err.path);
        err
    })?;
    Ok(config)
}

/// Reads, parses and validates a file.
pub(crate) fn from_yaml_file<T: ValidatedFile>(path: &std::path::Path) -> Result<T, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        source_name: Some(name.clone()),
        location: None,
        path: String::new(),
        message: format!("cannot read the file: {e}"),
    })?;
    from_yaml_str(&text, &name)
}

impl InfergateConfig {
    /// Parses and validates; `source_name` (usually the file path) prefixes errors.
    pub fn from_yaml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        from_yaml_str(text, source_name)
    }

    /// Reads, parses and validates a file.
    pub fn from_yaml_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        from_yaml_file(path)
    }
}

/// The position of the field named by a rendered path like `models[2].pool`.
fn locate(text: &str, rendered_path: &str) -> Option<Location> {
    let path = parse_rendered_path(rendered_path)?;
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    let probe = Probe { target: &path.0 };
    match probe.deserialize(deserializer) {
        Err(err) if err.to_string().contains(PROBE_HIT) => {
            err.location().map(|l| Location { line: l.line(), column: l.column() })
        }
        _ => None,
    }
}

/// A path parsed back from its rendered form.
struct OwnedPath(Vec<OwnedSegment>);

enum OwnedSegment {
    Key(String),
    Index(usize),
}

fn parse_rendered_path(rendered: &str) -> Option<OwnedPath> {
    let mut out = Vec::new();
    for part in rendered.split('.') {
        let (key, rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(OwnedSegment::Key(key.to_string()));
        }
        for index in rest.split('[') {
            let digits = index.trim_end_matches(']');
            if !digits.is_empty() {
                out.push(OwnedSegment::Index(digits.parse().ok()?));
            }
        }
    }
    Some(OwnedPath(out))
}

struct Probe<'p> {
    target: &'p [OwnedSegment],
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((OwnedSegment::Key(wanted), rest)) = self.target.split_first() else {
            return hit_or_skip_map(self.target, map);
        };
        while let Some(key) = map.next_key::<String>()? {
            if &key == wanted {
                map.next_value_seed(Probe { target: rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((OwnedSegment::Index(wanted), rest)) = self.target.split_first() else {
            if self.target.is_empty() {
                return Err(de::Error::custom(PROBE_HIT));
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut index = 0;
        loop {
            let found = if index == *wanted {
                seq.next_element_seed(Probe { target: rest })?
            } else {
                seq.next_element::<IgnoredAny>()?.map(|_| ())
            };
            if found.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

impl Probe<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.target.is_empty() { Err(E::custom(PROBE_HIT)) } else { Ok(()) }
    }
}

fn hit_or_skip_map<'de, A: MapAccess<'de>>(target: &[OwnedSegment], mut map: A) -> Result<(), A::Error> {
    if target.is_empty() {
        return Err(de::Error::custom(PROBE_HIT));
    }
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}
