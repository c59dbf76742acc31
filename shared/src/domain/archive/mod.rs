//! Archive jobs (design document 002): package finished work for long-term storage and prove it
//! intact. The state table (`job`), what each event decides (`decisions`), and the archive's
//! manifest and checksum list (`manifest`).

pub mod decisions;
pub mod job;
pub mod manifest;
pub mod record;
