//! Lambda: archive-task. Consumes the archive task queue (SQS, ReportBatchItemFailures): each
//! message one task — a shard to archive, the post-processing, a destination to store to.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::config::Function;
use granary::handlers::archive::tasks;
use granary::handlers::Ctx;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let ctx = &Ctx::from_env(Function::ArchiveTask).await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            granary::wiring::metered(ctx, tasks::handle_sqs(ctx, event.payload)).await,
        )
    }))
    .await
}
