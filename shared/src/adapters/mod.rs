pub mod aws;
pub mod memory;
