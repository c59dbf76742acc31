//! Lambda: requeuer. Consumes the retry queue (SQS, ReportBatchItemFailures).
#![cfg_attr(test, allow(clippy::too_many_lines))]

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::config::Function;
use granary::handlers::{requeuer, Ctx};
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::Requeuer).await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            granary::wiring::metered(ctx, requeuer::handle_sqs(ctx, event.payload)).await,
        )
    }))
    .await
}
