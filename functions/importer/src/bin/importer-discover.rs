//! Lambda: importer-discover. Invoked by an EventBridge schedule; lists GRANARY_SOURCE_URL and
//! registers new files as DISCOVERED items on the import queue.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use granary::config::Function;
use granary::handlers::importer::discover;
use granary::handlers::Ctx;
use granary::handlers::LambdaFailure;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::ImporterDiscover).await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            granary::wiring::metered(ctx, discover::discover(ctx))
                .await
                .map_err(|e| LambdaFailure::of(Function::ImporterDiscover, &e))
        },
    ))
    .await
}
