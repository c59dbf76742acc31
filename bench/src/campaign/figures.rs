//! A campaign's figures: its requests per granule, what they cost, and how they are printed.

use super::*;

/// A campaign's requests per granule (`submits` in all) and what they cost.
#[derive(Clone, Copy)]
pub(super) struct RequestsPerGranule {
    get: f64,
    put: f64,
    list: f64,
    copy: f64,
    delete: f64,
    sqs: f64,
    batch: f64,
    submits: u64,
    invocations: f64,
    gb_s: f64,
    /// Dollars per granule at the list prices.
    dollars: f64,
}

/// A campaign's S3 requests per granule by folder and by function.
pub(super) struct RequestBreakdown {
    puts_by_folder: BTreeMap<String, f64>,
    gets_by_folder: BTreeMap<String, f64>,
    lists_by_folder: BTreeMap<String, f64>,
    gets_by_function: BTreeMap<String, f64>,
    puts_by_function: BTreeMap<String, f64>,
}

/// What a campaign took: its time and its requests.
#[derive(Clone, Copy)]
pub(super) struct Measured {
    pub(super) wall_secs: f64,
    pub(super) cpu_secs: f64,
    pub(super) requests: RequestsPerGranule,
}

/// The requests the campaign of `n` granules made since `before`, per granule.
pub(super) fn measure_requests(
    n: usize,
    c: &granary_local::campaign::Campaign,
    before: &CountsBefore,
    by_function: &[(String, Arc<RequestCounts>)],
) -> (RequestsPerGranule, RequestBreakdown) {
    let after = snapshot_all(&c.counts);
    let per_granule_by_folder = |after: BTreeMap<String, u64>, before: &BTreeMap<String, u64>| {
        after
            .into_iter()
            .map(|(folder, count)| {
                let before = before.get(&folder).copied().unwrap_or(0);
                (folder, (count - before) as f64 / n as f64)
            })
            .collect::<BTreeMap<String, f64>>()
    };
    let puts_by_folder = per_granule_by_folder(c.counts.puts_by_folder(), &before.puts_by_folder);
    let gets_by_folder = per_granule_by_folder(c.counts.gets_by_folder(), &before.gets_by_folder);
    let lists_by_folder =
        per_granule_by_folder(c.counts.lists_by_folder(), &before.lists_by_folder);
    let per_function = |count: fn(&RequestCounts) -> u64| {
        by_function
            .iter()
            .map(|(f, counts)| (f.clone(), count(counts) as f64 / n as f64))
            .collect::<BTreeMap<String, f64>>()
    };
    let mut gets_by_function = per_function(|c| c.s3_get.load(Ordering::Relaxed));
    let mut puts_by_function = per_function(|c| c.s3_put.load(Ordering::Relaxed));
    let d = |i: usize| (after[i] - before.all[i]) as f64 / n as f64;
    let (get, put, list, copy, delete, sqs) = (d(0), d(1), d(2), d(3), d(4), d(5));
    // What no function made: the simulated array children reading their window claim, as
    // a processing container does.
    for (by_function, total) in [(&mut gets_by_function, get), (&mut puts_by_function, put)] {
        let other = total - by_function.values().sum::<f64>();
        by_function.insert("other".to_owned(), other.max(0.0));
    }
    let p = &c.runtime.progress;
    let invocations =
        (p.feeder_runs + p.monitor_invocations + p.requeuer_invocations) as f64 / n as f64;
    // Lambda time ≈ the time the runner spent inside each handler (against the emulator).
    let handler_secs = (p.feeder_time + p.monitor_time + p.requeuer_time).as_secs_f64() / n as f64;
    let gb_s = handler_secs * prices::LAMBDA_MEMORY_GB;
    let dollars = invocations * prices::LAMBDA_REQUEST
        + gb_s * prices::LAMBDA_GB_SECOND
        + (put + list + copy) * prices::S3_PUT
        + get * prices::S3_GET
        + sqs * prices::SQS_REQUEST;
    let requests = RequestsPerGranule {
        get,
        put,
        list,
        copy,
        delete,
        sqs,
        batch: d(6),
        submits: after[7] - before.all[7],
        invocations,
        gb_s,
        dollars,
    };
    let breakdown = RequestBreakdown {
        puts_by_folder,
        gets_by_folder,
        lists_by_folder,
        gets_by_function,
        puts_by_function,
    };
    (requests, breakdown)
}

/// The campaign's figures, as `--json` prints them.
pub(super) fn campaign_figures(
    n: usize,
    o: &CampaignOptions,
    c: &granary_local::campaign::Campaign,
    measured: &Measured,
    breakdown: RequestBreakdown,
    summary: &granary_local::campaign::Summary,
) -> Result<CampaignFigures> {
    let Measured {
        wall_secs: wall,
        cpu_secs: cpu,
        requests: r,
    } = *measured;
    Ok(CampaignFigures {
        granules: n,
        ports: if o.in_memory { "in-memory" } else { "emulator" },
        item_records: c.runtime.ctx.config.layout.track_items,
        array_windows: c.runtime.ctx.config.feeder.array_windows,
        array_retries: c
            .runtime
            .ctx
            .config
            .jobs
            .as_ref()
            .is_some_and(|j| j.array_retries),
        parallel: o.parallel,
        submit_limit_per_sec: o.submit_limit_per_sec(),
        submit_job_calls: r.submits,
        submit_job_calls_per_granule: r.submits as f64 / n as f64,
        array_jobs: c.runtime.simulator.stats.arrays,
        feeder_interval_ms: o.feeder_interval_ms,
        granule_submit_count: o.granule_submit_count,
        reconcile_after_secs: o.reconcile_after_secs,
        faults: if o.faultless { "none" } else { "default" },
        reconciled: c.runtime.progress.reconciled,
        wall_secs: wall,
        granules_per_sec: n as f64 / wall,
        cpu_secs: cpu,
        succeeded: summary.succeeded,
        dead_lettered: summary.dead_lettered,
        unaccounted: summary.unaccounted,
        ended_twice: summary.ended_twice,
        s3_get_per_granule: r.get,
        s3_put_per_granule: r.put,
        s3_put_per_granule_by_folder: breakdown.puts_by_folder,
        s3_get_per_granule_by_folder: breakdown.gets_by_folder,
        s3_get_per_granule_by_function: breakdown.gets_by_function,
        s3_put_per_granule_by_function: breakdown.puts_by_function,
        s3_list_per_granule: r.list,
        s3_list_per_granule_by_folder: breakdown.lists_by_folder,
        s3_copy_per_granule: r.copy,
        s3_delete_per_granule: r.delete,
        s3_requests_per_granule: r.get + r.put + r.list + r.copy + r.delete,
        sqs_requests_per_granule: r.sqs,
        batch_calls_per_granule: r.batch,
        lambda_invocations_per_granule: r.invocations,
        lambda_gb_s_per_granule: r.gb_s,
        dollars_per_million: r.dollars * 1e6,
        peak_rss_mib: peak_rss_kib() as f64 / 1024.0,
        scratch_mib: c.scratch_bytes().context("the scratch files' sizes")? as f64
            / (1024.0 * 1024.0),
    })
}

/// The campaign's row of the summary table.
pub(super) fn campaign_row(
    n: usize,
    o: &CampaignOptions,
    c: &granary_local::campaign::Campaign,
    measured: &Measured,
) -> [String; 15] {
    let wall = measured.wall_secs;
    let r = measured.requests;
    [
        n.to_string(),
        if o.in_memory { "in-memory" } else { "emulator" }.to_owned(),
        if c.runtime.ctx.config.layout.track_items {
            "on"
        } else {
            "off"
        }
        .to_owned(),
        match (o.array_windows, o.array_retries) {
            (true, true) => "arrays, retries too",
            (true, false) => "arrays",
            (false, true) => "single jobs, retries by window",
            (false, false) => "single jobs",
        }
        .to_owned(),
        format!("{:.4}", r.submits as f64 / n as f64),
        format!("{wall:.0}"),
        format!("{:.1}", n as f64 / wall),
        format!("{:.2}", r.get),
        format!("{:.2}", r.put + r.list + r.copy),
        format!("{:.2}", r.delete),
        format!("{:.2}", r.sqs),
        format!("{:.2}", r.batch),
        format!("{:.3}", r.invocations),
        format!("{:.4}", r.gb_s),
        format!("{:.2}", r.dollars * 1e6),
    ]
}

/// Where the campaign's time went, on stderr.
pub(super) fn report_time(n: usize, c: &granary_local::campaign::Campaign, measured: &Measured) {
    let (wall, cpu) = (measured.wall_secs, measured.cpu_secs);
    let p = &c.runtime.progress;
    eprintln!(
        "campaign of {n}: {wall:.1} s, {cpu:.1} s of granary-bench CPU ({:.2} ms per granule); feeder {:.1} s, Batch simulator {:.1} s, job-monitor {:.1} s, requeuer {:.1} s; {} jobs swept up at the end",
        cpu * 1000.0 / n as f64,
        p.feeder_time.as_secs_f64(),
        p.simulator_time.as_secs_f64(),
        p.monitor_time.as_secs_f64(),
        p.requeuer_time.as_secs_f64(),
        c.runtime.simulator.stats.swept
    );
}
