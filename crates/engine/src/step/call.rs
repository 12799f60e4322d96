//! A tool call as the model made it, and how running one can fail: what the gate
//! (`gate`) and the run (`toolcall`) share.

use serde_json::Value;

/// One tool call as the model made it.
pub(crate) struct Call<'a> {
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
    pub(crate) input: &'a Value,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolCallError {
    #[error("tool `{name}` failed: {message}")]
    Fatal { name: String, message: String },
    #[error("a tool's thread panicked")]
    Panicked,
    #[error("cannot write the tool record {path}: {source}")]
    Record { path: String, source: std::io::Error },
}
