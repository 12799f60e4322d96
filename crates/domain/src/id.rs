//! Agent ids (`k7q2mx`, `k7q2mx.3.1`) and names (`PeachHollow`): validated as single
//! safe path components everywhere they enter.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("agent id `{0}` must not contain `/` or `..`")]
    PathLike(String),
    #[error("agent id `{0}` is not valid: a lowercase letter or digit run, then `.N` per generation")]
    Malformed(String),
    #[error("name `{0}` must not contain `/` or `..`")]
    NamePathLike(String),
    #[error("name `{0}` is not valid: start with a letter, then letters, digits, `-` or `_` (at most 64)")]
    NameMalformed(String),
}

/// A validated agent id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(String);

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

impl AgentId {
    pub fn parse(s: &str) -> Result<AgentId, IdError> {
        if s.contains('/') || s.contains("..") {
            return Err(IdError::PathLike(s.to_owned()));
        }
        let mut parts = s.split('.');
        let root = parts.next().unwrap_or("");
        let root_ok =
            !root.is_empty() && root.len() <= 32 && root.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let children_ok = parts
            .all(|p| !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0'));
        if !root_ok || !children_ok || s.len() > 128 {
            return Err(IdError::Malformed(s.to_owned()));
        }
        Ok(AgentId(s.to_owned()))
    }

    /// A fresh root id: six base32 characters from 30 random bits.
    pub fn root_from_random(random: u32) -> AgentId {
        let id = (0..6).map(|i| BASE32[((random >> (i * 5)) & 31) as usize] as char).collect();
        AgentId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The branch this agent lives on.
    pub fn branch(&self) -> String {
        format!("agents/{}", self.0)
    }

    /// How many generations below its root (a root is at depth 0).
    pub fn depth(&self) -> u32 {
        self.0.matches('.').count() as u32
    }

    /// Its `n`th child (`k7q2mx.3` for n = 3).
    pub fn child(&self, n: u32) -> AgentId {
        AgentId(format!("{}.{n}", self.0))
    }

    /// Its parent, if it is a child.
    pub fn parent(&self) -> Option<AgentId> {
        self.0.rsplit_once('.').map(|(p, _)| AgentId(p.to_owned()))
    }

    /// The root of its tree (itself, for a root).
    pub fn root(&self) -> AgentId {
        match self.0.split_once('.') {
            Some((root, _)) => AgentId(root.to_owned()),
            None => self.clone(),
        }
    }

    /// The number of this child under its parent.
    pub fn child_number(&self) -> Option<u32> {
        self.0.rsplit_once('.').and_then(|(_, n)| n.parse().ok())
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a display name.
pub fn validate_name(name: &str) -> Result<(), IdError> {
    if name.contains('/') || name.contains("..") {
        return Err(IdError::NamePathLike(name.to_owned()));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !first_ok || !rest_ok || name.len() > 64 {
        return Err(IdError::NameMalformed(name.to_owned()));
    }
    Ok(())
}

const FIRST: &[&str] = &[
    "Amber", "Birch", "Cedar", "Dusk", "Ember", "Fern", "Granite", "Hazel", "Iris", "Juniper", "Kestrel", "Linden",
    "Maple", "Nettle", "Oak", "Peach", "Quartz", "Rowan", "Sage", "Thistle", "Umber", "Violet", "Willow", "Yarrow",
];
const SECOND: &[&str] = &[
    "Brook", "Cove", "Dale", "Field", "Glen", "Harbor", "Hollow", "Isle", "Knoll", "Lake", "Meadow", "Moor", "Park",
    "Ridge", "Shore", "Spring", "Stone", "Vale", "Wood", "Yard",
];

/// A two-word display name from random bits (`PeachHollow`).
pub fn mint_name(random: u32) -> String {
    let a = FIRST[(random as usize) % FIRST.len()];
    let b = SECOND[(random as usize / FIRST.len()) % SECOND.len()];
    format!("{a}{b}")
}

/// FNV-1a, 64 bits: a hash that stays the same across builds and machines (workspace
/// names, cut tool names).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_knows_the_root_of_its_tree() {
        let id = |s: &str| AgentId::parse(s).expect("id");
        assert_eq!(id("k7q2mx.3.1").root(), id("k7q2mx"));
        assert_eq!(id("k7q2mx").root(), id("k7q2mx"));
    }

    #[test]
    fn ids_are_single_safe_components() {
        assert!(AgentId::parse("k7q2mx").is_ok());
        assert!(AgentId::parse("k7q2mx.3.1").is_ok());
        assert_eq!(AgentId::parse("../etc"), Err(IdError::PathLike("../etc".into())));
        assert_eq!(AgentId::parse("a/b"), Err(IdError::PathLike("a/b".into())));
        for bad in ["", "K7", "a.", "a.0", "a.x", "a b", ".a"] {
            assert!(AgentId::parse(bad).is_err(), "{bad:?} must be refused");
        }
        let child = AgentId::parse("k7q2mx.3").expect("child").child(12);
        assert_eq!((child.as_str(), child.depth(), child.child_number()), ("k7q2mx.3.12", 2, Some(12)));
        assert_eq!(child.parent().map(|p| p.to_string()), Some("k7q2mx.3".into()));
        let minted = AgentId::root_from_random(0xdead_beef);
        assert_eq!(AgentId::parse(minted.as_str()), Ok(minted.clone()));
        assert_eq!(minted.as_str().len(), 6);
    }

    #[test]
    fn names_are_checked_like_ids() {
        assert!(validate_name("PeachHollow").is_ok());
        assert!(validate_name(&mint_name(12345)).is_ok());
        assert!(matches!(validate_name("a/b"), Err(IdError::NamePathLike(_))));
        assert!(matches!(validate_name(".."), Err(IdError::NamePathLike(_))));
        assert!(matches!(validate_name("9lives"), Err(IdError::NameMalformed(_))));
    }
}
