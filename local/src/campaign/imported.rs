//! The files an importer finds in a campaign (`CampaignSpec::imported_files`): an in-memory
//! source listing them, the import queue with the template's redrive, and an inventory that
//! lists every other one too, so that the feeder and the importer's discovery meet on them.

use super::CampaignSpec;
use anyhow::{Context, Result};
use granary::adapters::memory::{MemoryQueue, MemorySource};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::handlers::importer::discover::raw_file_hash;
use granary::handlers::Ctx;
use granary::ports::{PutCondition, Queue, Source, SourceFile};
use std::sync::Arc;

use super::IMPORT_QUEUE_MAX_RECEIVES;

/// The source's files, with their ids.
pub(crate) struct ImportedFiles {
    files: Vec<(SourceFile, bytes::Bytes)>,
    ids: Vec<String>,
}

impl ImportedFiles {
    /// The spec's files: `import-NNNNN.dat`, a few bytes each, the same for a seed.
    pub(crate) fn of(spec: &CampaignSpec) -> Self {
        let mut out = Self {
            files: Vec::new(),
            ids: Vec::new(),
        };
        for i in 0..spec.imported_files {
            let body = bytes::Bytes::from(format!("seed {} file {i}\n", spec.plan.seed));
            let file = SourceFile {
                url: format!("https://source.example/import-{i:05}.dat"),
                name: format!("import-{i:05}.dat"),
                size: Some(body.len() as u64),
                last_modified: None,
                version: None,
                digest: None,
            };
            // A file whose hash makes no id is the importer's to reject; none of these does.
            if let Ok(id) = granary::domain::item::id_from_hash(&raw_file_hash(&file)) {
                out.ids.push(id.as_str().to_owned());
            }
            out.files.push((file, body));
        }
        out
    }

    /// The importer's source (`None`: the campaign has no importer).
    pub(crate) fn source(&self) -> Option<Arc<dyn Source>> {
        (!self.files.is_empty()).then(|| {
            Arc::new(MemorySource {
                files: self.files.clone(),
            }) as Arc<dyn Source>
        })
    }

    /// The import queue, redriven to a dead-letter queue of its own as the template's is.
    pub(crate) fn queue(&self) -> Option<Arc<dyn Queue>> {
        (!self.files.is_empty()).then(|| {
            let dlq = Arc::new(MemoryQueue::new("import-dlq"));
            Arc::new(MemoryQueue::new("import").with_redrive(dlq, IMPORT_QUEUE_MAX_RECEIVES))
                as Arc<dyn Queue>
        })
    }

    /// Every other file listed in an inventory of its own, fed after the sample's: each is
    /// both listed and discovered, and submitted once (docs/guarantees.md).
    pub(crate) async fn list_some(&self, ctx: &Ctx, spec: &CampaignSpec) -> Result<()> {
        let rows: Vec<InventoryRow> = self
            .ids
            .iter()
            .step_by(2)
            .map(|id| InventoryRow {
                granule_id: id.clone(),
                start_datetime: String::new(),
            })
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let bytes = write_inventory(&rows, &InventoryLayout::granary())
            .context("writing the inventory of imported files")?;
        let key = format!(
            "{}{:04}.parquet",
            ctx.config.layout.inventory_prefix,
            spec.inventories.max(1) + 1
        );
        ctx.store.put(&key, bytes, PutCondition::Overwrite).await?;
        Ok(())
    }

    /// The files' ids, in the source's order.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.ids.clone()
    }
}
