//! The context's repositories: every state object a handler reads or writes is reached through
//! one of these, over the context's store and its campaign's layout (`repositories`).

use super::Ctx;

impl Ctx {
    /// The feeder's tracker.
    pub fn tracker(&self) -> crate::repositories::TrackerObject<'_> {
        crate::repositories::TrackerObject {
            store: self.store.as_ref(),
            key: &self.config.layout.tracker_key,
        }
    }

    /// The inventories the feeder reads.
    pub fn inventories(&self) -> crate::repositories::Inventories<'_> {
        crate::repositories::Inventories {
            store: &self.store,
            prefix: &self.config.layout.inventory_prefix,
        }
    }

    /// The campaign's budget and deadline (`granary pace`).
    pub fn pace(&self) -> crate::repositories::pace::PaceObject<'_> {
        crate::repositories::pace::PaceObject {
            store: self.store.as_ref(),
            key: crate::repositories::pace::pace_key(&self.config.layout.tracker_key),
        }
    }

    /// The feeder's hold.
    pub fn hold(&self) -> crate::repositories::HoldObject<'_> {
        crate::repositories::HoldObject {
            store: self.store.as_ref(),
            key: &self.config.layout.hold_key,
        }
    }

    /// The attempts `granary cancel` ended or held back, and its records.
    pub fn cancelled(&self) -> crate::repositories::CancelledList<'_> {
        crate::repositories::CancelledList {
            store: self.store.as_ref(),
            claim_prefix: &self.config.layout.claim_prefix,
        }
    }

    /// Claims of one job, the open-claims index and the parked retries' markers.
    pub fn claims(&self) -> crate::repositories::Claims<'_> {
        crate::repositories::Claims {
            store: self.store.as_ref(),
            claim_prefix: &self.config.layout.claim_prefix,
            open_prefix: &self.config.layout.open_claim_prefix,
        }
    }

    /// The ingest queue's records and indexes (`GRANARY_INGEST_PREFIX`).
    pub fn ingest(&self) -> crate::repositories::ingest::Ingest {
        crate::repositories::ingest::Ingest::new(self.store.clone(), &self.config.ingest.prefix)
    }

    /// Archive job records (`GRANARY_ARCHIVE_PREFIX`).
    pub fn archives(&self) -> crate::repositories::archive::Archives {
        crate::repositories::archive::Archives::new(self.store.clone(), &self.config.archive.prefix)
    }

    /// The item records, their history and the in-flight index.
    pub fn items(&self) -> crate::repositories::items::Items {
        crate::repositories::items::Items::new(
            self.store.clone(),
            self.config.layout.item_prefixes.clone(),
        )
    }

    /// The log objects and their protocol.
    pub fn logs(&self) -> crate::repositories::logs::Logs<'_> {
        crate::repositories::logs::Logs::new(self.store.as_ref(), &self.config.layout.log_prefix)
    }

    /// Records a poison input under the reject prefix and dead-letters a notice of it.
    pub async fn reject(
        &self,
        kind: crate::repositories::rejects::RejectKind,
        reason: &str,
        source: &str,
        input: &str,
    ) -> Result<String, crate::repositories::rejects::RejectError> {
        crate::repositories::rejects::reject(
            self.store.as_ref(),
            self.failure_dlq.as_ref(),
            &self.config.layout.reject_prefix,
            kind,
            reason,
            source,
            input,
        )
        .await
    }

    /// Sets aside an item record no code can read (`why`): recorded with its bytes under the
    /// reject prefix and dead-lettered, so whoever found it can go on.
    pub async fn reject_corrupt_record(
        &self,
        key: &str,
        why: &str,
        found_by: &str,
    ) -> Result<(), crate::repositories::rejects::RejectError> {
        let raw = match self.store.get(key).await? {
            Some(o) => String::from_utf8_lossy(&o.body).into_owned(),
            None => "(gone before it could be read)".to_owned(),
        };
        self.reject(
            crate::repositories::rejects::RejectKind::CorruptItemRecord,
            &format!("item record {key} is not valid JSON: {why}"),
            found_by,
            &raw,
        )
        .await?;
        Ok(())
    }

    /// Window claims under this context's claim and open prefixes, with its lease.
    pub fn windows(&self) -> crate::repositories::windows::Windows<'_> {
        crate::repositories::windows::Windows {
            store: self.store.as_ref(),
            jobs: self.jobs.as_ref(),
            bucket: &self.config.layout.bucket,
            claim_prefix: &self.config.layout.claim_prefix,
            open_prefix: &self.config.layout.open_claim_prefix,
            lease: self.config.leases.claim_lease,
            concurrency: self.config.feeder.submit_concurrency,
            metrics: &self.metrics,
        }
    }

    /// Submits (granule, attempt) at most once, with this context's claim prefix and lease.
    pub async fn submit_once(
        &self,
        event: &crate::domain::granule::GranuleProcessingEvent,
        claimed_by: &str,
    ) -> Result<crate::repositories::SubmitOutcome, crate::repositories::RepositoryError> {
        self.submit_placed(event, Default::default(), claimed_by)
            .await
    }

    /// Parks (granule, attempt) for the feeder's next window of retries, at most once
    /// (`repositories::claims::park_once`).
    pub async fn park(
        &self,
        event: &crate::domain::granule::GranuleProcessingEvent,
        placement: crate::domain::claim::Placement,
        claimed_by: &str,
    ) -> Result<crate::repositories::ParkOutcome, crate::repositories::RepositoryError> {
        crate::repositories::park_once(
            self.store.as_ref(),
            self.attempt_at(&placement),
            event,
            claimed_by,
        )
        .await
    }

    /// Where this context's attempts are claimed, placed as `placement` says.
    fn attempt_at<'a>(
        &'a self,
        placement: &'a crate::domain::claim::Placement,
    ) -> crate::repositories::AttemptAt<'a> {
        crate::repositories::AttemptAt {
            claim_prefix: &self.config.layout.claim_prefix,
            open_prefix: &self.config.layout.open_claim_prefix,
            campaign: self.campaign(),
            placement,
        }
    }

    /// The Spot ends before `attempt`, as its claim keeps them (a first attempt, or one whose
    /// claim is gone, has none): what an operator's resume or the item sweeper sends with a
    /// retry message, having no end of Spot's to add.
    pub async fn spot_ends_before(
        &self,
        attempt: &crate::domain::granule::GranuleProcessingEvent,
    ) -> Result<u32, crate::repositories::RepositoryError> {
        Ok(self.placed_before(attempt).await?.spot_ends)
    }

    /// How `attempt` was placed, as its claim keeps it: the Spot ends before it and the memory
    /// it asked for (`domain::memory`), which a resend keeps. A first attempt, or one whose
    /// claim is gone, was placed plainly.
    pub async fn placed_before(
        &self,
        attempt: &crate::domain::granule::GranuleProcessingEvent,
    ) -> Result<crate::domain::claim::Placement, crate::repositories::RepositoryError> {
        if attempt.attempt <= 1 {
            return Ok(crate::domain::claim::Placement::default());
        }
        let key =
            crate::domain::layout::claims::claim_key(&self.config.layout.claim_prefix, attempt);
        Ok(
            crate::repositories::read_json::<crate::domain::claim::Claim>(
                self.store.as_ref(),
                &key,
            )
            .await?
            .map(|c| c.value.placement)
            .unwrap_or_default(),
        )
    }

    /// [`Ctx::submit_once`], the job placed as `placement` says (its queue, the capacity ends
    /// before it).
    pub async fn submit_placed(
        &self,
        event: &crate::domain::granule::GranuleProcessingEvent,
        placement: crate::domain::claim::Placement,
        claimed_by: &str,
    ) -> Result<crate::repositories::SubmitOutcome, crate::repositories::RepositoryError> {
        crate::repositories::submit_once(
            self.store.as_ref(),
            self.jobs.as_ref(),
            &self.metrics,
            self.attempt_at(&placement),
            self.config.leases.claim_lease,
            event,
            claimed_by,
        )
        .await
    }

    /// The campaigns' folders under `folder` (one delimited LIST).
    pub async fn campaign_folders(
        &self,
        folder: &str,
    ) -> Result<Vec<String>, crate::ports::StoreError> {
        self.store.list_folders(folder).await
    }

    /// Submits one job of any workflow at most once, on the one submission protocol, with this
    /// context's lease.
    pub async fn submit_claim_once(
        &self,
        submission: crate::repositories::Submission<'_, crate::domain::claim::Claim>,
    ) -> Result<crate::repositories::SubmitOutcome, crate::repositories::RepositoryError> {
        crate::repositories::submit_claim_once(
            self.store.as_ref(),
            self.jobs.as_ref(),
            &self.metrics,
            self.config.leases.claim_lease,
            submission,
        )
        .await
    }

    /// The entry of an array's child in its window claim (read once an instance, then kept).
    pub async fn window_granule(
        &self,
        child: crate::repositories::windows::ChildOf<'_>,
    ) -> Result<crate::domain::window::WindowEntry, crate::repositories::windows::WindowGranuleError>
    {
        self.window_granules
            .granule(self.store.as_ref(), &self.config.layout.claim_prefix, child)
            .await
    }

    /// The data objects in granary's bucket (downloaded files, an ingest job's files, staged
    /// archives).
    pub fn objects(&self) -> crate::repositories::objects::Objects {
        crate::repositories::objects::Objects::new(self.store.clone())
    }

    /// The data objects in another bucket (an archive's source or destination), written with
    /// `storage_class` where given.
    pub fn bucket(
        &self,
        bucket: &str,
        storage_class: Option<&str>,
    ) -> crate::repositories::objects::Objects {
        crate::repositories::objects::Objects::new(self.buckets.store(bucket, storage_class))
    }
}
