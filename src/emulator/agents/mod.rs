//! The agents surface of the emulator: blueprints, bundles, runs, evaluations, optimizations and
//! the node registry (`routes`), their records (`store`), the Agent state table as data
//! (`table`), the jobs the shared executor runs for them (`work`) and the stand-in models that
//! write their results (`outputs`).

pub(crate) mod catalog;
pub(crate) mod outputs;
pub(crate) mod routes;
pub(crate) mod store;
pub(crate) mod table;
pub(crate) mod work;

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::json;

use store::{type_id, BlueprintRec, BundleRec, Store};

pub(crate) struct Agents {
    pub store: Mutex<Store>,
    /// `lag_agent_status`: how long a finished run still reads `running`.
    pub lag: Mutex<Duration>,
}

impl Agents {
    pub fn new() -> Self {
        Agents { store: Mutex::new(canonical_store()), lag: Mutex::new(Duration::ZERO) }
    }
}

/// The canonical blueprints and their Quick Start bundles, visible to every organization.
fn canonical_store() -> Store {
    let mut store = Store::default();
    for c in catalog::CANONICAL {
        let seq = store.next_seq();
        let blueprint = BlueprintRec {
            id: type_id("blp"),
            key: c.key.to_string(),
            lineage: c.key.to_string(),
            name: c.name.to_string(),
            description: c.description.to_string(),
            document: catalog::canonical_document(c),
            yaml: None,
            org: None,
            active: true,
            created: SystemTime::now(),
            seq,
        };
        for data_set in c.quick_start {
            let seq = store.next_seq();
            store.bundles.push(BundleRec {
                id: type_id("bnd"),
                name: format!("{} Quick Start ({data_set})", c.key.to_uppercase()),
                description: format!("{} on the {data_set} data set.", c.name),
                blueprint_id: blueprint.id.clone(),
                values: json!({}),
                models: json!({}),
                artifacts: json!({}),
                org: None,
                created: SystemTime::now(),
                seq,
                last_run: 0,
            });
        }
        store.blueprints.push(blueprint);
    }
    store
}
