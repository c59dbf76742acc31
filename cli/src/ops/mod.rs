//! Operator commands' logic (the bin only parses arguments and prints): status, reports, plan.

pub mod audit;
pub mod chart;
pub mod html;
pub mod plan;
pub mod report;
pub mod status;
