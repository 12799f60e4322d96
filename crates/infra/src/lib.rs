//! Talks to the world: git (libgit2), provider wire protocols over HTTP and SSE,
//! processes, locks, time and the built-in tools. Knows nothing of agents; may use
//! only the standard library and its crates.

pub mod door;
pub mod git;
pub mod lock;
pub mod mcp;
pub mod otel;
pub mod process;
pub mod provider;
pub mod redact;
pub mod sandbox;
pub mod signals;
pub mod time;
pub mod tools;
pub mod watch;
pub mod words;
