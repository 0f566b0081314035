//! Validated names, bodies, jobs and leases: the values that cross the
//! [`Store`](crate::Store) contract. The modules: `names` ([`Topic`],
//! [`JobId`], [`JobKey`]), `jobs` ([`Body`], [`NewJob`], [`JobState`], what
//! an enqueue answers and a read shows), `leases` ([`Lease`], the holder's
//! calls), `listings` (counts, pages of topics and jobs), `import`
//! ([`ImportJob`]). Every type is re-exported here, so `dq_core::model::X`
//! and `dq_core::X` name it.

mod import;
mod jobs;
mod leases;
mod listings;
mod names;

pub use import::*;
pub use jobs::*;
pub use leases::*;
pub use listings::*;
pub use names::*;
