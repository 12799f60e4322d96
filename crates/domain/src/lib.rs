//! What things are: ids and names, the workspace layout, config, an agent's facts,
//! the transcript, inbox deposits and context assembly. Pure data in, data out; may
//! use `infra` for the canonical provider types and tool specs, never for effects.

pub mod agent;
pub mod budget;
pub mod compaction;
pub mod config;
pub mod confinement;
pub mod context;
pub mod eval;
pub mod glob;
pub mod grant;
pub mod hooks;
pub mod id;
pub mod inbox;
pub mod layout;
pub mod marks;
pub mod mcp;
pub mod permissions;
pub mod question;
pub mod results;
pub mod step;
pub mod tool_env;
pub mod transcript;
pub mod trust;
