//! Property tests over inventory bytes: an inventory truncated, with bytes flipped, or not Parquet
//! at all is opened and read with a clear error naming the file, or read whole — never a panic.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use bytes::Bytes;
use granary::adapters::memory::MemoryStore;
use granary::adapters::parquet::{write_inventory, Inventory, InventoryLayout, InventoryRow};
use granary::ports::{ObjectStore, PutCondition};
use proptest::prelude::*;
use std::sync::Arc;

const KEY: &str = "inventories/0001.parquet";

fn valid() -> Vec<u8> {
    let rows: Vec<InventoryRow> = (0..300)
        .map(|i| InventoryRow {
            granule_id: format!("HLS.S30.T18TYN.2022{:03}T153012.v2.0", i % 365 + 1),
            start_datetime: "2022-01-01T15:30:12Z".into(),
        })
        .collect();
    write_inventory(&rows, &InventoryLayout::granary())
        .expect("writing the sample inventory")
        .to_vec()
}

/// Opens and reads every row; `Ok(rows)` or the error's text.
fn read_all(bytes: Vec<u8>) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = Arc::new(MemoryStore::new());
        store
            .put(KEY, Bytes::from(bytes), PutCondition::Overwrite)
            .await
            .expect("memory put");
        let inventory = Inventory::open(store, KEY, "granule_id")
            .await
            .map_err(|e| e.to_string())?;
        let ids = inventory
            .read_ids(0, inventory.num_rows())
            .await
            .map_err(|e| e.to_string())?;
        Ok(ids.len())
    })
}

#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Flip { at: usize, xor: u8 },
    Replace(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Damage::Flip { at, xor }),
        proptest::collection::vec(any::<u8>(), 0..2048).prop_map(Damage::Replace),
    ]
}

#[test]
fn the_sample_reads_whole() {
    assert_eq!(read_all(valid()), Ok(300));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn damaged_inventories_fail_clearly_never_panic(d in damage()) {
        let mut bytes = valid();
        match d {
            Damage::Truncate(n) => bytes.truncate(n % bytes.len()),
            Damage::Flip { at, xor } => {
                let i = at % bytes.len();
                bytes[i] ^= xor;
            }
            Damage::Replace(other) => bytes = other,
        }
        match read_all(bytes) {
            // A flipped byte inside the data pages can leave a readable file.
            Ok(n) => prop_assert!(n <= 300),
            Err(e) => prop_assert!(e.contains(KEY), "the error names the file: {e}"),
        }
    }
}
