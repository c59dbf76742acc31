pub mod aws;
pub mod counting;
pub mod http_source;
pub mod memory;
