//! End-to-end tests: the real `offshoot` binary against the scripted model server.

mod support;

mod agent_git;
mod children;
mod compaction;
mod config;
mod conformance;
mod containment;
mod conversation;
mod crash;
mod disk;
mod doctor;
mod door;
mod errors;
mod faults;
mod fuzz;
mod headless;
mod hints;
mod input;
mod json;
mod layering;
mod live;
mod mcp;
mod model;
mod ownership;
mod processes;
mod project;
mod providers;
mod readme;
mod sandbox;
mod scan;
mod signals;
mod snapshots;
mod stress;
mod tools;
mod verbs;
