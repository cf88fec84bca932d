//! How the Lease is held: a leaf both the Lease's manager and the tenure (which judges it) read.

use std::time::Duration;

/// How the Lease is held (its name is `Config::leader_election_id`).
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// This replica's identity (the pod's name).
    pub identity: String,
    /// How long a holder's lock is valid after its last renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews (also the clock skew tolerated).
    pub grace: Duration,
    /// How long before the lock's expiry (on this replica's own clock, from its last renewal)
    /// the fence stops its writes: the clock skew between replicas and the time a write takes
    /// to land. Below `grace`, so a renewal on time never lets the proof lapse.
    pub margin: Duration,
}

impl LeaseSettings {
    /// kube-lease-manager's defaults: a 30 s lock renewed 5 s before it expires, so a replica
    /// that dies is replaced within half a minute and a slow API server does not flap it; its
    /// writes stop 2 s before the lock could expire for the others.
    pub fn new(identity: impl Into<String>) -> Self {
        LeaseSettings {
            identity: identity.into(),
            duration: Duration::from_secs(30),
            grace: Duration::from_secs(5),
            margin: Duration::from_secs(2),
        }
    }
}
