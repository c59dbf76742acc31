//! Logging setup shared by the Lambda binaries: JSON lines (CloudWatch Logs Insights parses them),
//! level from RUST_LOG (default info).

pub fn init_lambda_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .without_time() // CloudWatch stamps every line
        .try_init();
}
