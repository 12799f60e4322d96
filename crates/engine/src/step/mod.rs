//! The step loop: the driver, model calls, tool calls and the tools that move agents,
//! MCP servers, compaction, and the events a driver reports.

pub(crate) mod approval;
pub mod call;
pub mod compaction;
pub mod driver;
pub mod events;
pub(crate) mod gate;
pub(crate) mod hooks;
pub mod mcp;
pub mod model;
pub mod telemetry;
pub(crate) mod toolcall;
pub mod tools;
