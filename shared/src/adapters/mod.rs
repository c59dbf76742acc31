//! Implementations of the ports: AWS (S3, SQS, Batch, EventBridge), in-memory twins, the Parquet
//! inventory reader, the HTTP source, and taps (decorators that count, fault or log calls).

pub mod aws;
pub mod http;
pub mod memory;
pub mod parquet;
pub mod tap;
