//! Operator commands' logic (the bin only parses arguments and prints): status, reports.

pub mod chart;
pub mod report;
pub mod status;
