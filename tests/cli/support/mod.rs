pub mod clean;
pub mod daemon;
pub mod https;
pub mod pty;
pub mod server;
pub mod ssh;
pub mod wait;
pub mod workspace;
