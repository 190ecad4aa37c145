//! Model versions: the [`repository`] on disk, the pure [`lifecycle`]
//! decisions (which version to serve, which are refused), the one [`load`]
//! path (load, choose precision, warm up, or refuse), the [`first`] version
//! at start and the [`watcher`] that swaps new ones in while serving, each
//! as a handover that passes down the pipeline (`stages::handover`).

pub mod first;
pub mod lifecycle;
pub mod load;
pub mod repository;
pub mod watcher;
