//! Deliberate defects, each a rule granary keeps switched off, for showing that the proof fails
//! without the rule: README quotes what each one breaks, and `scripts/mutants.sh` (`make
//! mutants`) builds with the `mutants` feature, switches each on in turn with `GRANARY_MUTANT`,
//! runs the test that must catch it and says whether it did. Without the feature, [`on`] is a
//! constant `false` and the defects compile away.

/// A mutant: its name (the value of `GRANARY_MUTANT`), the defect, and the test that catches it
/// (`cargo nextest run -p granary` arguments).
pub struct Mutant {
    pub name: &'static str,
    pub defect: &'static str,
    pub caught_by: &'static str,
}

pub const ALL: [Mutant; 27] = [
    Mutant {
        name: "download-failure-read-back-ends-the-loop",
        defect: "a download attempt's failure that reads back as already recorded (its write landed, a later call of the change was refused) ends the download: the item sits DOWNLOADING_FAILED with nothing to move it",
        caught_by: "--lib a_failure_recorded_before_a_refused_call_is_still_retried_in_the_loop",
    },
    Mutant {
        name: "screen-before-the-marker",
        defect: "a window looks for its granules' records before its open marker is written: a file the importer discovers in between is submitted by both",
        caught_by: "--lib a_file_listed_and_discovered_at_once_is_submitted_once",
    },
    Mutant {
        name: "feeder-ignores-open-windows",
        defect: "the feeder looks only at item records for the granules it already has, not at the open array windows whose granules get their records at their ends (a granule listed again while its array runs is submitted twice)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "discover-ignores-open-windows",
        defect: "the importer's discovery queues a file whose id an open window of the feeder holds (an array's in flight, its record made only at its end): the granule is processed twice",
        caught_by: "--lib discovery_queues_no_file_an_open_window_holds",
    },
    Mutant {
        name: "parked-markers-removed-first",
        defect: "the feeder removes the markers of the parked retries it lists before it claims their window of retries (a crash between strands them: parked, with no marker and no window)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "parked-marker-trusted",
        defect: "the feeder takes a parked retry's marker without reading its claim (a marker written again after a window took the granule submits it twice)",
        caught_by: "--lib a_stale_parked_marker_is_removed_not_submitted_again",
    },
    Mutant {
        name: "last-attempt-queue-not-listed",
        defect: "granary looks its jobs up by name on the main job queue only, not on the last-attempt queue too (a requeuer's last chance submitted there and its answer lost is submitted again)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "takeover-without-lookup",
        defect: "a submission that takes over a claim (a feeder window, a requeued attempt, an ingest processing attempt) submits its unrecorded jobs again without looking them up by name",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "cancel-listed-after-routing",
        defect: "the monitor marks a cancelled end routed (the log's mark; with item records, the record's move to ABANDONED) before listing it for `granary resume --cancelled` (a crash between strands the granule, given up and listed nowhere)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "monitor-routes-a-recorded-failure-again",
        defect: "a failure delivered again does not take its item record past the attempt for the mark of its route (with item records no log is marked routed): the failure is routed twice",
        caught_by: "--lib a_failure_delivered_twice_is_routed_once_by_the_log_or_the_record",
    },
    Mutant {
        name: "feeder-submits-known-granules",
        defect: "the feeder submits a granule granary already has a record for (imported, or listed before)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "reconciler-counts-no-record-as-handled",
        defect: "the reconciler counts a logged end with no item record as handled (the monitor died between the two)",
        caught_by: "--lib a_logged_end_whose_record_never_followed",
    },
    Mutant {
        name: "monitor-leaves-a-missing-record",
        defect: "the monitor handles an end whose item record its submitter has not made yet and leaves the record to come later",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "history-not-paid-before-moving",
        defect: "a record moves on without first writing the history entries it held (its last write's)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "claim-takeover-within-lease",
        defect: "a submission takes over a claim without a job id while its lease still runs (ListJobs may not show the job yet)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "sweeper-timeout-path-in-steps",
        defect: "the item sweeper writes a timeout's path (DOWNLOADING_FAILED, then IGNORE) one transition at a time",
        caught_by: "--test crash_points a_crash_inside_the_recovery_of_the_importer",
    },
    Mutant {
        name: "ingest-notice-after-record",
        defect: "an ingest job's failure is recorded before its DLQ notice is sent",
        caught_by: "--test ingest_crash_points =the_ingest_queue_recovers_from_a_crash_at_every_call",
    },
    Mutant {
        name: "records-made-only-at-a-first-attempt",
        defect: "the monitor and the requeuer make a missing item record only for a first attempt (a retry that runs and succeeds before the window's record is made leaves it to the window's late creation)",
        caught_by: "--test crash_points every_crash_point",
    },
    Mutant {
        name: "ingest-record-before-markers-leaving-an-end",
        defect: "an operator's resume or update report writes the record before moving its markers out of a state no tick scans",
        caught_by: "--test ingest_crash_points the_ingest_operator_commands",
    },
    Mutant {
        name: "mint-without-claim",
        defect: "the storing step mints an identifier without first claiming the mint on the job's record",
        caught_by: "--lib a_lost_mint_answer_is_never_minted_again",
    },
    Mutant {
        name: "archive-tick-without-fan-out-repair",
        defect: "the archive tick leaves a phase's unsent tasks to the job's mover alone",
        caught_by: "--test archive_crash_points an_archive_job_recovers",
    },
    Mutant {
        name: "revalidation-keeps-the-success",
        defect: "re-validation sends a processed item round without revoking the success its products came from (the new attempt's failure is taken for a late end of a granule that succeeded: not routed, the item left PROCESSING)",
        caught_by: "--lib the_attempt_a_revalidation_sends_round_is_routed_when_it_fails",
    },
    Mutant {
        name: "already-succeeded-leaves-the-record",
        defect: "a failure of a granule that succeeded at that attempt or an earlier one leaves its item record as it is (a record still PROCESSING the failing attempt sits there with nothing coming)",
        caught_by: "--lib a_failure_after_an_earlier_attempts_late_success_leaves_the_item_processed",
    },
    Mutant {
        name: "unreadable-description-left-unended",
        defect: "the reconciler only rejects a finished job Batch describes in a way no code can read, though its own claim names the attempt (the window counts it handled and closes: the granule has no log, no record and no dead letter)",
        caught_by: "--lib a_window_job_batch_describes_unreadably_is_dead_lettered_with_why_and_the_window_closes",
    },
    Mutant {
        name: "manifest-read-anywhere",
        defect: "the ingest dispatcher reads a submission's manifest from any key of granary's bucket, not only the manifests it keeps (another collection's objects land in the submitter's job and report)",
        caught_by: "--lib a_manifest_url_naming_another_collections_object_is_refused_unread",
    },
    Mutant {
        name: "timed-out-attempt-retried-in-step",
        defect: "a download or callback is tried again in the same step however long its step has run (a server that never answers outlives every step's share, nothing is recorded, and its job starts again at attempt 1 every tick, for ever)",
        caught_by: "--lib a_server_that_never_answers_fails_its_job_after_its_attempts_one_a_tick",
    },
    Mutant {
        name: "dispatcher-reads-no-timeout",
        defect: "the ingest and archive dispatchers read no GRANARY_FUNCTION_TIMEOUT_SECS (their ticks have no budget and run until Lambda ends them)",
        caught_by: "--test template_config the_dispatchers_read_their_timeout_from_the_template",
    },
];

/// Whether mutant `name` is switched on (only ever with the `mutants` feature).
#[cfg(feature = "mutants")]
pub fn on(name: &str) -> bool {
    debug_assert!(ALL.iter().any(|m| m.name == name), "no mutant {name}");
    std::env::var("GRANARY_MUTANT").is_ok_and(|m| m == name)
}

/// Whether mutant `name` is switched on: never, in a build without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub fn on(_name: &str) -> bool {
    false
}
