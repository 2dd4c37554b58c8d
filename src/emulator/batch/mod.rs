//! The batch surface of the emulator: jobs over the organization's files, run by the shared
//! executor with stand-in pipelines. One module per concern: the routes (`routes`), the create
//! checks (`create`), the records (`store`), the status table as data (`table`), the pipeline
//! registry (`pipelines`), both list styles (`listing`), the job on the executor (`work`), the
//! stand-in outputs (`outputs`) and the presigned output URLs (`storage`).

pub(crate) mod create;
pub(crate) mod listing;
pub(crate) mod outputs;
pub(crate) mod pipelines;
pub(crate) mod routes;
pub(crate) mod storage;
pub(crate) mod store;
pub(crate) mod table;
pub(crate) mod work;

pub(crate) use store::BatchStore;
