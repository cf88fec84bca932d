//! Leadership in one place: the Lease (kube-lease-manager's, [`lease`]), what this replica can
//! prove about it between renewals ([`tenure`]), the fence every converge write asks
//! ([`fence`]), and the orphan-delete windows shutdown waits for ([`windows`]). `settings` is
//! the leaf the Lease and the tenure share, so neither imports the other back. [`writer`] is
//! the service's API client fenced by the tenure: every cluster write goes through it.

pub mod fence;
pub mod lease;
pub mod settings;
pub mod tenure;
pub mod windows;
pub mod writer;

pub use lease::{LeaderError, Leadership, default_election_id, default_identity};
pub use settings::LeaseSettings;
