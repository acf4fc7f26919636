//! Configuration errors that point at the offending field, and at its line when the
//! source text is known.

use std::fmt;

/// One step of a path into the configuration document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    Key(&'static str),
    Index(usize),
}

/// A path such as `models[2].pool`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<PathSegment>);

impl FieldPath {
    pub fn root() -> Self {
        Self(Vec::new())
    }

    pub fn key(&self, key: &'static str) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Key(key));
        next
    }

    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Index(index));
        next
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(key) if i == 0 => write!(f, "{key}")?,
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Where in the source text an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file or source name, when known.
    pub source_name: Option<String>,
    pub location: Option<Location>,
    /// Empty for syntax errors that have no field.
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn at(path: &FieldPath, message: impl Into<String>) -> Self {
        Self { source_name: None, location: None, path: path.to_string(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.source_name {
            write!(f, "{name}:")?;
        }
        if let Some(loc) = self.location {
            write!(f, "{}:{}:", loc.line, loc.column)?;
        }
        if self.source_name.is_some() || self.location.is_some() {
            write!(f, " ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ConfigError {}
