//! What this replica can prove about its Lease, on its own monotonic clock: the converge's
//! fence asks it right before each write.
//!
//! kube-lease-manager renews the Lease in its own task and reports only changes of
//! leadership, and it notices a takeover only at its next renewal. So the proof is kept here,
//! from the Lease manager's own requests: its client is wrapped ([`observing_client`]) and
//! every successful answer about the Lease is read. A write that set a new `renewTime` with
//! this replica as holder is a renewal, dated when the request was *sent* (before the server
//! stored it, so never later than the renewal the other replicas judge expiry from). An answer
//! naming another holder (or none) ends the proof at once. A replica may write while
//! `last renewal + lease duration - margin` lies ahead on its monotonic clock; the margin
//! covers the clock skew between replicas (the others judge expiry from `renewTime` on their
//! own wall clocks) and the time a write takes to reach the server.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::client::Body;

use crate::converge::fence::Fenced;
use crate::service::leadership::settings::LeaseSettings;

#[derive(Debug, Default)]
enum Mode {
    /// Leadership is not set up yet: nothing may be written.
    #[default]
    Unbound,
    /// No election (`--leader-elect` off): this replica always may write.
    Always,
    Elected(Proof),
}

#[derive(Debug)]
struct Proof {
    lease: String,
    identity: String,
    duration: Duration,
    margin: Duration,
    /// The holder named by the last successful answer about the Lease.
    holder: Option<String>,
    /// Its `renewTime`, to tell a renewal from another write (the transitions counter).
    renew_time: Option<MicroTime>,
    /// When the last write that renewed it for this replica was sent.
    renewed: Option<Instant>,
}

/// Shared by the Lease's client (which feeds it) and the converge's fence (which asks it).
#[derive(Clone, Debug, Default)]
pub struct Tenure {
    mode: Arc<Mutex<Mode>>,
}

impl Tenure {
    fn mode(&self) -> std::sync::MutexGuard<'_, Mode> {
        self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No election: every check passes.
    pub fn bind_always(&self) {
        *self.mode() = Mode::Always;
    }

    /// Election on the Lease `name` in `namespace`: checks pass only while this replica can
    /// prove it holds it.
    pub fn bind_elected(&self, namespace: &str, name: &str, settings: &LeaseSettings) {
        *self.mode() = Mode::Elected(Proof {
            lease: format!("{namespace}/{name}"),
            identity: settings.identity.clone(),
            duration: settings.duration,
            margin: settings.margin,
            holder: None,
            renew_time: None,
            renewed: None,
        });
    }

    /// A successful answer about the Lease to a request sent at `sent` with `method`.
    pub fn observe(&self, method: &Method, sent: Instant, lease: &Lease) {
        let mut mode = self.mode();
        let Mode::Elected(proof) = &mut *mode else {
            return;
        };
        let spec = lease.spec.as_ref();
        let holder = spec.and_then(|s| s.holder_identity.clone());
        let renew_time = spec.and_then(|s| s.renew_time.clone());
        let ours = holder.as_deref() == Some(proof.identity.as_str());
        let written = matches!(*method, Method::PATCH | Method::PUT | Method::POST);
        if !ours {
            if proof.renewed.is_some() {
                tracing::warn!(lease = %proof.lease, holder = holder.as_deref().unwrap_or(""),
                    "the Lease is no longer ours: no more writes");
            }
            proof.renewed = None;
        } else if written && renew_time.is_some() && renew_time != proof.renew_time {
            proof.renewed = Some(proof.renewed.map_or(sent, |r| r.max(sent)));
        }
        proof.holder = holder;
        proof.renew_time = renew_time;
    }

    /// May this replica write now?
    pub fn check(&self) -> Result<(), Fenced> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), Fenced> {
        let mode = self.mode();
        let proof = match &*mode {
            Mode::Always => return Ok(()),
            Mode::Unbound => return Err(Fenced::NotSetUp),
            Mode::Elected(proof) => proof,
        };
        let lease = proof.lease.to_string();
        if proof.holder.as_deref() != Some(proof.identity.as_str()) {
            return Err(match &proof.holder {
                Some(holder) => Fenced::HeldBy {
                    lease,
                    holder: holder.clone(),
                },
                None => Fenced::NotHeld { lease },
            });
        }
        let Some(renewed) = proof.renewed else {
            return Err(Fenced::NotRenewed { lease });
        };
        let valid = proof.duration.saturating_sub(proof.margin);
        let since = now.saturating_duration_since(renewed);
        if since >= valid {
            return Err(Fenced::Unproven {
                lease,
                since,
                valid,
                duration: proof.duration,
                margin: proof.margin,
            });
        }
        Ok(())
    }
}

/// `client`, reporting every successful answer about the Lease `namespace/name` to `tenure`.
/// Only the Lease manager uses it.
pub fn observing_client(
    client: kube::Client,
    namespace: &str,
    name: &str,
    tenure: Tenure,
) -> kube::Client {
    let default_namespace = client.default_namespace().to_string();
    let observe = Observe {
        client,
        path: Arc::from(format!(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        )),
        tenure,
    };
    kube::Client::new(observe, default_namespace)
}

#[derive(Clone)]
struct Observe {
    client: kube::Client,
    path: Arc<str>,
    tenure: Tenure,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower::Service<Request<Body>> for Observe {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let watched = request.uri().path() == &*self.path;
        let method = request.method().clone();
        let (client, tenure) = (self.client.clone(), self.tenure.clone());
        Box::pin(async move {
            let sent = Instant::now();
            let response = client.send(request).await?;
            if !watched || !response.status().is_success() {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let bytes = body.collect_bytes().await?;
            if let Ok(lease) = serde_json::from_slice::<Lease>(&bytes) {
                tenure.observe(&method, sent, &lease);
            }
            Ok(Response::from_parts(parts, Body::from(bytes)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn settings() -> LeaseSettings {
        LeaseSettings {
            duration: Duration::from_secs(30),
            margin: Duration::from_secs(2),
            ..LeaseSettings::new("replica-a")
        }
    }

    fn lease(holder: Option<&str>, renewed_at_second: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::from_second(renewed_at_second).unwrap(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Each row: the answers seen (method, sent at +s, holder, renewTime), then the check at
    /// +s and whether it passes.
    #[test]
    fn a_replica_may_write_only_while_it_can_prove_it_holds_the_lease() {
        type Seen = (Method, u64, Option<&'static str>, i64);
        let me = Some("replica-a");
        let other = Some("replica-b");
        let table: &[(&str, &[Seen], u64, bool)] = &[
            ("never answered", &[], 0, false),
            ("acquired", &[(Method::PATCH, 0, me, 1)], 1, true),
            (
                "acquired, at the end of its proof",
                &[(Method::PATCH, 0, me, 1)],
                28,
                false,
            ),
            (
                "acquired, just before",
                &[(Method::PATCH, 0, me, 1)],
                27,
                true,
            ),
            (
                "renewed later",
                &[(Method::PATCH, 0, me, 1), (Method::PATCH, 20, me, 21)],
                40,
                true,
            ),
            (
                "a write that kept renewTime is no renewal",
                &[(Method::PATCH, 0, me, 1), (Method::PATCH, 20, me, 1)],
                28,
                false,
            ),
            (
                "a read of our own Lease is no renewal",
                &[(Method::PATCH, 0, me, 1), (Method::GET, 20, me, 21)],
                28,
                false,
            ),
            (
                "taken over: refused at once",
                &[(Method::PATCH, 0, me, 1), (Method::GET, 2, other, 3)],
                3,
                false,
            ),
            (
                "our renewal after a takeover renews the other's lock, not ours",
                &[(Method::PATCH, 0, me, 1), (Method::PATCH, 2, other, 3)],
                3,
                false,
            ),
            (
                "released",
                &[(Method::PATCH, 0, me, 1), (Method::PATCH, 2, None, 3)],
                3,
                false,
            ),
            (
                "taken back later",
                &[
                    (Method::PATCH, 0, me, 1),
                    (Method::GET, 2, other, 3),
                    (Method::PATCH, 40, me, 41),
                ],
                41,
                true,
            ),
        ];
        let start = Instant::now();
        for (what, seen, at, allowed) in table {
            let tenure = Tenure::default();
            tenure.bind_elected("flux-system", "flux-converger", &settings());
            for (method, sent, holder, renew) in *seen {
                tenure.observe(method, start + secs(*sent), &lease(*holder, *renew));
            }
            let checked = tenure.check_at(start + secs(*at));
            assert_eq!(checked.is_ok(), *allowed, "{what}: {checked:?}");
            if let Err(message) = checked {
                assert!(
                    message.to_string().contains("flux-system/flux-converger"),
                    "{what}: {message}"
                );
            }
        }
    }

    #[test]
    fn without_election_every_check_passes_and_before_setup_none_does() {
        let tenure = Tenure::default();
        assert!(tenure.check().is_err());
        tenure.bind_always();
        assert!(tenure.check().is_ok());
        // Answers about a Lease do not matter without election.
        tenure.observe(&Method::GET, Instant::now(), &lease(Some("replica-b"), 1));
        assert!(tenure.check().is_ok());
    }
}
