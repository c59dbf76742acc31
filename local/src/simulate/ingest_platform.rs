//! What happens around the ingest handlers as simulated time passes: Batch runs and ends the
//! processing jobs, EventBridge delivers (or loses) their events, an operator holds and releases
//! a batch; and whether the world has settled.

use super::ingest_world::{draw, unit, IngestWorld};
use anyhow::Result;
use granary::adapters::memory::{job_state_change, Ending, MintBehaviour};
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::deposit::{MintFix, MINT_UNKNOWN};
use granary::domain::ingest::job::JobState;
use granary::handlers::ingest::holds::{self, Target};
use granary::handlers::ingest::operator;
use granary::ports::{OutgoingMessage, Queue};
use std::time::Duration;
use tokio::time::Instant;

impl IngestWorld {
    /// Batch runs the processing jobs: each new one waits in the queue and runs for minutes;
    /// at its end, Spot may have reclaimed it (first attempts) or its application failed (a
    /// poisoned object, every attempt); its event reaches the queue seconds later, or never.
    pub async fn end_jobs_due(&mut self) -> Result<()> {
        let now = Instant::now();
        let seed = self.seed;
        let running = self.jobs.running();
        for (_, job) in &running {
            if self.seen_jobs.insert(job.job_id.clone()) {
                let queued = 30 + draw(seed, &format!("{} queued", job.job_name)) % 600;
                let ran = 300 + draw(seed, &format!("{} ran", job.job_name)) % 2_100;
                let at = now + Duration::from_secs(queued + ran);
                self.job_ends.insert((at, job.job_id.clone()), ());
            }
        }
        while let Some(((at, id), ())) = self.job_ends.first_key_value() {
            if *at > now {
                break;
            }
            let id = id.clone();
            self.job_ends.pop_first();
            let Some((request, job)) = running.iter().find(|(_, j)| j.job_id == id) else {
                continue; // ended already (terminated)
            };
            let object = match request.environment.get("INGEST_JOB_ID") {
                Some(ingest_job) => self.object_of(ingest_job).await?,
                None => None,
            };
            let poisoned = object
                .and_then(|(b, n)| self.fates.get(b)?.get(n).copied())
                .is_some_and(|f| f.poisoned);
            let first = job.job_name.ends_with("-a1");
            let ending = if poisoned {
                Ending::Exited(1)
            } else if first && unit(seed, &format!("{} spot", job.job_name)) < 0.15 {
                Ending::SpotReclaimed
            } else {
                Ending::Succeeded
            };
            let Some(detail) = self.jobs.end(&id, ending) else {
                continue;
            };
            if unit(seed, &format!("{} lost", job.job_name)) < 0.03 {
                self.events_lost += 1;
                continue;
            }
            let delay = Duration::from_secs(draw(seed, &format!("{} delay", job.job_name)) % 30);
            self.on_the_way.insert(
                (now + delay, self.put),
                job_state_change(&detail).to_string(),
            );
            self.put += 1;
        }
        Ok(())
    }

    /// EventBridge puts the events whose time has come on the events queue.
    pub async fn deliver_events_due(&mut self) -> Result<()> {
        let now = Instant::now();
        while let Some(((at, _), _)) = self.on_the_way.first_key_value() {
            if *at > now {
                break;
            }
            if let Some((_, body)) = self.on_the_way.pop_first() {
                self.events.send(OutgoingMessage::new(body)).await?;
            }
        }
        Ok(())
    }

    /// The world's own clockwork: EZID's outage starts and ends; ListJobs catches up.
    pub fn time_passes(&mut self) {
        let now = Instant::now();
        let outage = self.ezid_outage_at..self.ezid_outage_at + super::ingest_world::EZID_OUTAGE;
        self.minter.behave(if outage.contains(&now) {
            MintBehaviour::LoseAnswer
        } else {
            MintBehaviour::Mint
        });
        if now >= self.listing_caught_up + super::ingest_world::LISTING_LAG {
            self.jobs.catch_up_listing();
            self.listing_caught_up = now;
        }
    }

    /// The operator's round, every half hour: a job failed "minting outcome unknown" (EZID lost
    /// the answer) is resolved with what EZID holds for it (found by its `granary.job`
    /// metadata), or minted again when it holds nothing; its batch, once ended again, gets an
    /// update report.
    pub async fn resolve_unknown_mints(&mut self) -> Result<()> {
        let now = Instant::now();
        if now < self.looked_at + Duration::from_secs(30 * 60) {
            return Ok(());
        }
        self.looked_at = now;
        let at = granary::clock::now();
        for id in self.batch_ids().await? {
            let Some(batch) = self.ctx.ingest().batch(&id).await? else {
                continue;
            };
            let ended = matches!(
                batch.value.state,
                BatchState::Completed | BatchState::Failed
            );
            let mut resolved_here = false;
            for n in 1..=batch.value.jobs {
                let jid = id.job(n);
                let Some(job) = self.ctx.ingest().job(&jid).await? else {
                    continue;
                };
                resolved_here |= self.resolved.contains(jid.as_str());
                let unknown = job.value.state == JobState::Failed
                    && job.value.reason.starts_with(MINT_UNKNOWN);
                if !unknown {
                    continue;
                }
                let fix = match self.minter.minted_for(jid.as_str()).first() {
                    Some(found) => MintFix::Identifier(found.clone()),
                    None => MintFix::MintAgain,
                };
                if operator::resume_with_mint(&self.ctx, &jid, &fix, at)
                    .await
                    .is_ok()
                {
                    self.resolved.insert(jid.to_string());
                }
            }
            if ended && resolved_here && batch.value.reports < 2 {
                operator::update_report(&self.ctx, &id, at).await.ok();
            }
        }
        Ok(())
    }

    /// An operator holds the second batch for an hour ("checking the depositor's files"), then
    /// releases it. A command that fails is run again at the next round.
    pub async fn operate(&mut self) -> Result<()> {
        self.time_passes();
        self.resolve_unknown_mints().await?;
        let now = Instant::now();
        if self.held && self.released {
            return Ok(());
        }
        let mut second = None;
        for id in self.batch_ids().await? {
            if self.place_of(&id).await? == Some(1) {
                second = Some(id);
            }
        }
        let Some(id) = second else {
            return Ok(());
        };
        let target = Target::Batch(id);
        let at = granary::clock::now();
        if !self.held && now >= self.hold_at {
            self.held = holds::hold(
                &self.ctx,
                &target,
                "checking the depositor's files",
                "ops",
                at,
            )
            .await
            .is_ok();
        } else if self.held && !self.released && now >= self.release_at {
            self.released = holds::release(&self.ctx, &target, at).await.is_ok();
        }
        Ok(())
    }

    /// The next time something is due: a submission, a job's end, an event's arrival, the
    /// operator's next command.
    pub fn next_due(&self) -> Option<Instant> {
        let operator = match (self.held, self.released) {
            (false, _) => Some(self.hold_at),
            (true, false) => Some(self.release_at),
            _ => None,
        };
        [
            self.submissions.iter().map(|(at, _)| *at).min(),
            self.job_ends.first_key_value().map(|((at, _), _)| *at),
            self.on_the_way.first_key_value().map(|((at, _), _)| *at),
            operator,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// What the run's progress is seen by: each batch's and job's state, and what is on its way.
    pub async fn progress(&self) -> Result<String> {
        let mut seen = format!(
            "{} {} {} {}",
            self.submissions.len(),
            self.job_ends.len(),
            self.on_the_way.len(),
            self.jobs.running().len()
        );
        for id in self.batch_ids().await? {
            if let Some(b) = self.ctx.ingest().batch(&id).await? {
                seen.push_str(&format!(" {}", b.value.state));
                for n in 1..=b.value.jobs {
                    if let Some(j) = self.ctx.ingest().job(&id.job(n)).await? {
                        seen.push_str(&format!(" {}{}", j.value.state, j.value.retry_count));
                    }
                }
            }
        }
        Ok(seen)
    }

    /// Every batch submitted and ended (reported), nothing running or on its way.
    pub async fn settled(&self, batches: usize) -> Result<bool> {
        let quiet = self.submissions.is_empty()
            && self.job_ends.is_empty()
            && self.on_the_way.is_empty()
            && self.jobs.running().is_empty()
            && self.held
            && self.released;
        if !quiet {
            return Ok(false);
        }
        let depth = self.events.depth().await?;
        if depth.visible + depth.in_flight > 0 {
            return Ok(false);
        }
        let ids = self.batch_ids().await?;
        if ids.len() < batches {
            return Ok(false);
        }
        for id in ids {
            let state = self.ctx.ingest().batch(&id).await?.map(|b| b.value.state);
            if !matches!(
                state,
                Some(BatchState::Completed | BatchState::Failed | BatchState::Deleted)
            ) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
