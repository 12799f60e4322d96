pub mod server;
pub mod wait;
pub mod workspace;
