//! Lambda: archive-dispatcher. Invoked by an EventBridge schedule: every archive job that has not
//! ended is moved as far as it can go (initialized, started, its phases fanned out and in, errors
//! retried or failed, failures handled, cleaned up).
#![cfg_attr(test, allow(clippy::too_many_lines))]

use granary::config::Function;
use granary::handlers::archive;
use granary::handlers::Ctx;
use granary::handlers::LambdaFailure;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::ArchiveDispatcher).await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            granary::wiring::metered(ctx, archive::tick(ctx, chrono::Utc::now()))
                .await
                .map_err(|e| LambdaFailure::of(Function::ArchiveDispatcher, &e))
        },
    ))
    .await
}
