//! Implementations of the ports: AWS (S3, SQS, Batch, EventBridge), in-memory twins, the Parquet
//! inventory reader, the HTTP source, taps (decorators that count, fault or log calls), and the refusing ports of
//! a configuration section a function does not read.

pub mod aws;
pub mod http;
pub mod memory;
pub mod paced;
pub mod parquet;
pub mod tap;
pub mod unset;
