pub mod daemon;
pub mod pty;
pub mod server;
pub mod wait;
pub mod workspace;
