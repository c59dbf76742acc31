pub mod aws;
pub mod counting;
pub mod memory;
