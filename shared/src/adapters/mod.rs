pub mod access_log;
pub mod aws;
pub mod counting;
pub mod faults;
pub mod http_source;
pub mod memory;
pub mod tap;
