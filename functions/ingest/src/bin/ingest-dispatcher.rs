//! Lambda: ingest-dispatcher. Invoked by an EventBridge schedule: one pass of every ingest step
//! (batches spawn, jobs move on, batches report and are cleaned up).
#![cfg_attr(test, allow(clippy::too_many_lines))]

use granary::config::Function;
use granary::handlers::ingest;
use granary::handlers::Ctx;
use granary::handlers::{HandlerError, LambdaFailure};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::IngestDispatcher).await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            let s = granary::wiring::metered(ctx, ingest::tick(ctx, chrono::Utc::now()))
                .await
                .map_err(|e| LambdaFailure::of(Function::IngestDispatcher, &e))?;
            // Every other job went on; the invocation still fails, so the Errors alarm sees it.
            if s.errors > 0 {
                let e = HandlerError::Refused(format!(
                    "{} job or batch steps failed (see the log); the next tick tries them again",
                    s.errors
                ));
                return Err(LambdaFailure::of(Function::IngestDispatcher, &e));
            }
            Ok(s)
        },
    ))
    .await
}
