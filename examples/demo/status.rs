//! Reads what the service reports about itself, over its own HTTP API (`/readyz`,
//! `/status/{namespace}/{name}`, `/status/applications/{namespace}/{name}`), as a user's script
//! or the dashboard would.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use flux_converger::model::{RevisionRecord, RevisionState};
use serde_json::Value;

#[derive(Clone)]
pub struct ServiceApi {
    base: String,
    http: reqwest::Client,
}

impl ServiceApi {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits until `/readyz` answers 200; `Err` with its last answer otherwise.
    pub async fn ready(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            match self.http.get(self.url("/readyz")).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last)
    }

    /// `GET path`: the status code and the `Content-Type`.
    pub async fn head(&self, path: &str) -> Result<(u16, String), String> {
        let r = self
            .http
            .get(self.url(path))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let content_type = r
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Ok((r.status().as_u16(), content_type))
    }

    /// The history `/status/{namespace}/{name}` reports, newest first (empty when the
    /// Kustomization is not known yet).
    pub async fn history(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<RevisionRecord>, String> {
        self.history_at(&format!("/status/{namespace}/{name}"))
            .await
    }

    /// One gated object's detail at `path` (`/status/{namespace}/{name}` of a Kustomization,
    /// `/status/applications/{namespace}/{name}` of an Application); `Null` when it is not
    /// known yet (404).
    pub async fn detail(&self, path: &str) -> Result<Value, String> {
        let r = self
            .http
            .get(self.url(path))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Value::Null);
        }
        if !r.status().is_success() {
            return Err(format!("GET {path}: {}", r.status()));
        }
        let body = r.bytes().await.map_err(|e| e.to_string())?;
        serde_json::from_slice(&body).map_err(|e| format!("{path}: {e}"))
    }

    /// The history the detail at `path` reports, newest first (empty when not known yet).
    pub async fn history_at(&self, path: &str) -> Result<Vec<RevisionRecord>, String> {
        let detail = self.detail(path).await?;
        if detail.is_null() {
            return Ok(Vec::new());
        }
        serde_json::from_value(detail["revisions"].clone())
            .map_err(|e| format!("{path} revisions: {e}"))
    }

    /// Waits until the record of `revision` satisfies `pred`; its last version (or why there
    /// is none) otherwise.
    pub async fn record_until(
        &self,
        namespace: &str,
        name: &str,
        revision: &str,
        timeout: Duration,
        pred: impl Fn(&RevisionRecord) -> bool,
    ) -> Result<RevisionRecord, String> {
        self.record_until_at(
            &format!("/status/{namespace}/{name}"),
            revision,
            timeout,
            pred,
        )
        .await
    }

    /// [`Self::record_until`] for the detail at `path`.
    pub async fn record_until_at(
        &self,
        path: &str,
        revision: &str,
        timeout: Duration,
        pred: impl Fn(&RevisionRecord) -> bool,
    ) -> Result<RevisionRecord, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let history = self.history_at(path).await?;
            let record = history.into_iter().find(|r| r.revision == revision);
            match record {
                Some(r) if pred(&r) => return Ok(r),
                Some(r) if Instant::now() >= deadline => {
                    return Err(format!("after {timeout:?}: {r:?}"));
                }
                None if Instant::now() >= deadline => {
                    return Err(format!("no record of {revision} after {timeout:?}"));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits for the service's finished record of `revision` (any state but `running`).
    pub async fn finished(
        &self,
        namespace: &str,
        name: &str,
        revision: &str,
        timeout: Duration,
    ) -> Result<RevisionRecord, String> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        while Instant::now() < deadline {
            let history = self.history(namespace, name).await?;
            if let Some(r) = history.into_iter().find(|r| r.revision == revision) {
                if r.state != RevisionState::Running {
                    return Ok(r);
                }
                last = Some(r.state);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(match last {
            Some(state) => format!("still {} after {timeout:?}", state.as_str()),
            None => format!("no record of {revision} after {timeout:?}"),
        })
    }
}
