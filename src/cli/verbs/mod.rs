//! One file per verb: its arguments (the doc comment is its `--help`) and `run`.

pub mod apply;
pub mod attach;
pub mod compact;
pub mod completions;
pub mod config;
pub mod demo;
pub mod diff;
pub mod dispatch;
pub mod doctor;
pub mod export;
pub mod fork;
pub mod gc;
pub mod log;
pub mod ls;
pub mod mcp;
pub mod new;
pub mod prompt;
pub mod rm;
pub mod run;
pub mod scan;
pub mod send;
pub mod show;
pub mod stop;
pub mod tool;
pub mod tree;
pub mod uncompact;
