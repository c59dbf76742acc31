//! Lambda: queue feeder. Invoked by the EventBridge schedule with {"granule_submit_count": N}.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use granary::config::Function;
use granary::handlers::LambdaFailure;
use granary::handlers::{feeder, Ctx};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::QueueFeeder).await?;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<feeder::FeederEvent>| async move {
            granary::wiring::metered(ctx, feeder::run(ctx, event.payload))
                .await
                .map_err(|e| LambdaFailure::of(Function::QueueFeeder, &e))
        },
    ))
    .await
}
