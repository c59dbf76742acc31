//! Lambda: item-sweeper. Invoked by an EventBridge schedule: first the reconciler (submitted
//! attempts whose end never reached the monitor), then the sweeper (items stuck in DOWNLOADING or
//! PROCESSING past their timeout).

use granary::config::Function;
use granary::handlers::failure::LambdaFailure;
use granary::handlers::importer::{sweeper, Importer};
use granary::handlers::reconciler;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    granary::wiring::init_lambda_tracing();
    let imp = &Importer::from_env(Function::ItemSweeper).await?;
    lambda_runtime::run(service_fn(
        move |_: LambdaEvent<serde_json::Value>| async move {
            let now = chrono::Utc::now();
            let reconciled = reconciler::reconcile(&imp.ctx, now)
                .await
                .map_err(|e| LambdaFailure::of(&e))?;
            let swept = sweeper::sweep(imp, now)
                .await
                .map_err(|e| LambdaFailure::of(&e))?;
            Ok::<_, LambdaFailure>(serde_json::json!({ "reconcile": reconciled, "sweep": swept }))
        },
    ))
    .await
}
