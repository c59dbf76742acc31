//! Lambda: item-sweeper. Invoked by an EventBridge schedule: first the reconciler (submitted
//! attempts whose end never reached the monitor), then the sweeper (items stuck in DOWNLOADING or
//! PROCESSING past their timeout), each within its share of the function's timeout.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use granary::budget::Budget;
use granary::config::Function;
use granary::handlers::importer::sweeper;
use granary::handlers::Ctx;
use granary::handlers::LambdaFailure;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::ItemSweeper).await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            let budget = Budget::of_invocation(ctx.config.leases.function_timeout);
            let pass = granary::wiring::metered(
                ctx,
                sweeper::scheduled_pass(ctx, chrono::Utc::now(), &budget),
            )
            .await
            .map_err(|e| LambdaFailure::of(Function::ItemSweeper, &e))?;
            Ok::<_, LambdaFailure>(pass)
        },
    ))
    .await
}
