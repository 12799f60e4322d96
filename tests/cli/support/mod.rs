pub mod server;
pub mod workspace;
