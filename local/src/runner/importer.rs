//! The importer's scheduled discovery (`RunnerOptions::discover_interval`): the source listed and
//! each new file registered and queued, as the importer-discover function's schedule does. The
//! import queue is one of the pollers' event sources (`pollers::Source::Importer`).

use super::round::Rounds;
use super::{LambdaFunction, LocalRuntime};
use anyhow::Result;
use granary::handlers::importer::discover;
use tokio::time::Instant;

impl LocalRuntime {
    /// A discovery run once its period has passed. The activity it brings: the files it
    /// queued.
    pub(super) async fn discover_if_due(&mut self, rounds: &mut Rounds) -> Result<u64> {
        let Some(every) = self.options.discover_interval else {
            return Ok(0);
        };
        if Instant::now() < rounds.next_discover {
            return Ok(0);
        }
        rounds.next_discover = Instant::now() + every;
        let (ctx, faults) = self.invocation(LambdaFunction::ImporterDiscover);
        let timeout = self.options.timeouts.importer_discover;
        let ran = tokio::time::timeout(timeout, discover::discover(&ctx)).await;
        self.progress.importer_invocations += 1;
        let timed_out = ran.is_err();
        let crashed = timed_out || faults.as_ref().is_some_and(|f| f.crashed());
        self.progress.crashed_invocations += u64::from(crashed);
        self.progress.timed_out_invocations += u64::from(timed_out);
        match ran {
            // A run Lambda ended, or that failed, did what it did: the schedule fires again.
            Err(_) => Ok(1),
            Ok(Ok(summary)) => Ok(summary.queued),
            Ok(Err(_)) if self.options.chaos.is_some() || crashed => Ok(1),
            Ok(Err(e)) => Err(anyhow::Error::new(e).context("importer-discover")),
        }
    }

    /// Before a campaign with an importer is called settled: a discovery run as the schedule
    /// would make it, which queues any file still DISCOVERED (one a feeder's window dropped
    /// while discovery left it to the window). The files it queued.
    pub(super) async fn discover_as_if_later(&mut self) -> Result<u64> {
        if self.options.discover_interval.is_none() {
            return Ok(0);
        }
        let (ctx, _) = self.invocation(LambdaFunction::ImporterDiscover);
        match discover::discover(&ctx).await {
            Ok(summary) => Ok(summary.queued),
            Err(e) if self.options.chaos.is_some() => {
                tracing::warn!(error = %e, "a discovery failed: the schedule runs it again");
                Ok(1)
            }
            Err(e) => Err(anyhow::Error::new(e).context("importer-discover")),
        }
    }

    /// Before a campaign with an importer is called settled: the item sweeper's sweep run as
    /// its schedule would run it a download timeout from now, which times out a download whose
    /// invocation died (its message, redelivered, finds it DOWNLOADING and leaves it to the
    /// sweeper). The items it moved.
    pub(super) async fn sweep_as_if_later(&mut self) -> Result<u64> {
        if self.options.discover_interval.is_none() {
            return Ok(0);
        }
        let (ctx, _) = self.invocation(LambdaFunction::Sweeper);
        let later = granary::clock::now()
            + ctx.config.retry_policy.download_timeout
            + chrono::Duration::seconds(1);
        match granary::handlers::importer::sweeper::sweep(&ctx, later).await {
            Ok(s) => Ok(s.retried + s.gave_up + s.finished_by_batch + s.errors),
            Err(e) if self.options.chaos.is_some() => {
                tracing::warn!(error = %e, "a sweep failed: the schedule runs it again");
                Ok(1)
            }
            Err(e) => Err(anyhow::Error::new(e).context("item-sweeper")),
        }
    }
}
